package templatedir_test

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/outbox/templatedir"
	"github.com/postbox/postbox/smtp"
)

type discard struct{}

func (discard) Send(context.Context, smtp.Message) error { return nil }

// A kind's kind.json priority reaches the database through the Dispatcher
// that renders with the directory: a plain-SQL row of the kind written
// afterwards, naming no priority, takes it.
func TestKindPriority_FromKindJSONToPlainSQL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	set, err := templatedir.Load("testdata/receipts")
	if err != nil {
		t.Fatal(err)
	}
	if got := set.KindPriorities(); len(got) != 1 || got["receipt"] != outbox.PriorityLow {
		t.Fatalf("KindPriorities = %v, want receipt at %d as receipt/kind.json says", got, outbox.PriorityLow)
	}
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: discard{}, Renderer: set})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(ctx, d.RunTimeout(0)); err != nil {
		t.Fatal(err)
	}
	var p outbox.Priority
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload, next_attempt_at)
		VALUES ('receipt', 'cus_1', '{"to": "lin@example.com"}', now() + interval '1 hour') RETURNING priority`).Scan(&p); err != nil {
		t.Fatal(err)
	}
	if p != outbox.PriorityLow {
		t.Errorf("a plain-SQL receipt row has priority %d, want %d", p, outbox.PriorityLow)
	}
}
