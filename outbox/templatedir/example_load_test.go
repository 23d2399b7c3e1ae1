package templatedir_test

import (
	"context"
	"fmt"
	"log"

	"github.com/postbox/postbox/outbox/templatedir"
)

// Load a template directory and render its receipt kind with the kind's
// own sample payload, as `worker templates render receipt` does. A Set is
// the dispatcher's outbox.Config.Renderer in `worker run`.
func ExampleLoad() {
	set, err := templatedir.Load("testdata/receipts")
	if err != nil {
		log.Fatal(err) // names the file and line of a broken template
	}
	msg, err := set.Preview(context.Background(), "receipt", "sample.json", set.Sample("receipt"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Subject:", msg.Subject)
	fmt.Print(msg.Text)
	// Output:
	// Subject: Receipt for order ord_1001
	// Hello Ada,
	//
	// Thank you for order ord_1001, €12.50 in all:
	// - Earl Grey <loose leaf>
	// - Scones
	//
	// Your download: https://shop.example.com/d/sample
	//
	// Example Shop · reply to this email with any question
}
