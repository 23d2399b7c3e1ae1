package outbox_test

import (
	"context"
	"fmt"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// A custom Renderer brands invoice emails and skips reminders for invoices
// that were paid after the email was enqueued; every other kind goes to
// the built-in templates.
func ExampleRendererFunc() {
	paid := map[string]bool{"INV-0041": true} // in real life: a query, bounded by the render budget
	builtin := outbox.DefaultRenderer()
	renderer := outbox.RendererFunc(func(ctx context.Context, row *outbox.Row) (smtp.Message, error) {
		if row.Kind != outbox.KindInvoice {
			return builtin.Render(ctx, row)
		}
		if row.Payload.Trigger == "invoice.reminder" && paid[row.Payload.InvoiceNumber] {
			return smtp.Message{}, outbox.ErrSkip // marked skipped; its links are scrubbed
		}
		msg, err := builtin.Render(ctx, row)
		msg.Subject = "Acme · " + msg.Subject
		return msg, err
	})

	for _, number := range []string{"INV-0041", "INV-0042"} {
		row := &outbox.Row{ID: "row-" + number, Kind: outbox.KindInvoice, Payload: outbox.Payload{
			To: "ada@example.com", Subject: "Reminder: invoice " + number, InvoiceNumber: number, Trigger: "invoice.reminder",
		}}
		msg, err := renderer.Render(context.Background(), row)
		fmt.Printf("%s: %q %v\n", number, msg.Subject, err)
	}
	// Output:
	// INV-0041: "" outbox: renderer skipped the email
	// INV-0042: "Acme · Reminder: invoice INV-0042" <nil>
}
