package outbox

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

// senderFunc adapts a function to Sender.
type senderFunc func(ctx context.Context, msg smtp.Message) error

func (f senderFunc) Send(ctx context.Context, msg smtp.Message) error { return f(ctx, msg) }

// TestDispatch_FinalDotUnansweredCostsOneCopy locks the unanswered final dot
// (see docs/design/outbox-transport.md, Redelivery semantics): a relay that
// takes the whole message and never answers its final dot used to get the
// message again on every retry (each attempt a possible copy). Now the first
// attempt's missing reply is "possibly delivered": the row is failed at once
// — one copy handed over, however many retry slots remain — and last_error
// tells the operator to check the recipient before requeueing. The schedule
// is compressed: 1 ms slots, the send bounded to 1 s instead of the dial and
// exchange budgets.
func TestDispatch_FinalDotUnansweredCostsOneCopy(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	var mu sync.Mutex
	copies := map[string]int{} // row id → messages handed over (final dot written)
	_, mailer := newSinkMailerWith(t, smtpsink.Options{Hang: func(e smtpsink.Envelope) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(string(e.Data), "\r\n") {
			if id, ok := strings.CutPrefix(line, "Message-ID: <"); ok {
				id, _, _ = strings.Cut(id, "@")
				copies[id]++
			}
		}
		return true
	}})
	sender := senderFunc(func(ctx context.Context, msg smtp.Message) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return mailer.Send(ctx, msg)
	})

	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Backoff = leases.Backoff{time.Millisecond, time.Millisecond, time.Millisecond} })
	for range 4 { // one claim per slot, and one more
		if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1 AND status = 'pending'`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := d.runBatch(ctx); err != nil {
			t.Fatal(err)
		}
	}

	mu.Lock()
	n := copies[id]
	mu.Unlock()
	st := getRow(t, pool, id)
	if n != 1 {
		t.Errorf("the relay was handed %d copies of the row (attempts %d, status %s); want exactly 1", n, st.Attempts, st.Status)
	}
	if st.Status != "failed" || st.Attempts != 1 {
		t.Fatalf("row is %s after %d attempts (last_error %q); want failed after 1", st.Status, st.Attempts, lastErr(st))
	}
	for _, want := range []string{"possibly delivered: the relay did not answer the final dot within", "check the recipient before requeueing"} {
		if !strings.Contains(lastErr(st), want) {
			t.Errorf("last_error %q; want it to contain %q", lastErr(st), want)
		}
	}
}
