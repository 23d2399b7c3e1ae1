package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// A plain-SQL row of a kind this worker cannot render — well formed, so
// the table took it, but neither built in nor given a Renderer that knows
// it — fails on its first attempt, never reaching the relay, with
// last_error naming the kind, under one "render:" prefix. A custom kind's
// row needs no subject to get that far: the payload rules are Validate's
// for the kind.
func TestDispatcher_UnknownKindFailsPermanentlyNamingIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	sender := newFakeSender(func(context.Context, smtp.Message) error { return nil })
	d := newDispatcher(t, pool, sender)
	for _, tc := range []struct {
		kind    string
		payload map[string]any
	}{
		{"newsletter", rawPayload("ada@example.com")},
		{"receipt", map[string]any{"to": "ada@example.com", "order_id": "ord_1"}},
	} {
		id := insertRow(t, pool, tc.kind, tc.payload)
		if _, err := d.Drain(testCtx(t), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		r := getRow(t, pool, id)
		if r.Status != "failed" || r.Attempts != 1 || !strings.Contains(lastErr(r), `kind "`+tc.kind+`"`) {
			t.Errorf("%s row: %s after %d attempts, last_error %q; want failed at once naming the kind", tc.kind, r.Status, r.Attempts, lastErr(r))
		}
		if n := strings.Count(lastErr(r), "render"); n != 1 {
			t.Errorf("%s row: last_error %q says render %d times; want the prefix once", tc.kind, lastErr(r), n)
		}
		if n := sender.callsFor(id); n != 0 {
			t.Errorf("%s row reached the sender %d times", tc.kind, n)
		}
	}
}
