package history_test

import (
	"fmt"
	"time"

	"github.com/postbox/postbox/internal/engine/history"
)

func ExampleFormatRetention() {
	for _, d := range []time.Duration{0, 90 * 24 * time.Hour, 36 * time.Hour} {
		fmt.Println(history.FormatRetention(d))
	}
	// Output:
	// forever
	// 90d
	// 36h0m0s
}
