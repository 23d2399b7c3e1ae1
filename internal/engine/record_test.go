package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
)

// TestRecord_OneOrderForEveryEnding: a stale mark logs its warn line, a
// failed mark its error line with the error, an applied one observes and
// logs the transport's line; each under the transport's attributes, and
// only the applied mark observes.
func TestRecord_OneOrderForEveryEnding(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mark     error
		want     string
		observed bool
	}{
		{"stale", fmt.Errorf("%w (row 7)", claim.ErrStale), `level=WARN msg="stale line" row_id=7 would=x`, false},
		{"lost", errors.New("conn reset"), `level=ERROR msg="lost line" row_id=7 would=x error="conn reset"`, false},
		{"applied", nil, `level=INFO msg="applied line" row_id=7 outcome=sent`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			observed := false
			r := engine.Report{
				Logger:  slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Attrs:   []any{"row_id", "7"},
				Outbox:  "email_outbox",
				Stale:   engine.Line{Msg: "stale line", Attrs: []any{"would", "x"}},
				Lost:    engine.Line{Msg: "lost line", Attrs: []any{"would", "x"}},
				Applied: engine.Line{Level: slog.LevelInfo, Msg: "applied line", Attrs: []any{"outcome", "sent"}},
				Observe: func() { observed = true },
			}
			err := engine.Record(context.Background(), r, func(context.Context) error { return tc.mark })
			if err != tc.mark {
				t.Errorf("Record returned %v, want the mark's %v", err, tc.mark)
			}
			if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, tc.want) {
				t.Errorf("logged %q, want one line with %q", got, tc.want)
			}
			if observed != tc.observed {
				t.Errorf("observed = %v, want %v", observed, tc.observed)
			}
		})
	}
}
