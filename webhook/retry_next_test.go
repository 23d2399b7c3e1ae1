package webhook

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// An idle retry lane comes back when the next back-off ends, not at its
// poll: with a poll of an hour, a delivery that comes due after the lane
// has gone idle (cold after a claim that found nothing) is attempted in the same window. The
// delivery is written before the lane starts, so no wake-up tells of it.
func TestRetry_IdleLaneWakesWhenTheNextRetryIsDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var p *Dispatcher
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		p.Stop() // claims no more: the lane's run ends once this attempt is marked
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, pool, rc.URL)
	p = newDispatcher(t, pool, func(c *Config) { c.Poll = time.Hour })
	// Due after the lane has gone cold: its first claim and the one at
	// HotPoll find nothing long before.
	if _, err := pool.Exec(ctx, `WITH ev AS (INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id)
INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at) SELECT id, $1, 1, now() + interval '3 seconds' FROM ev`, ep.ID); err != nil {
		t.Fatal(err)
	}
	// The window is long enough for the due time on a busy machine, and
	// far shorter than the poll; the attempt ends it.
	tally, err := p.RunRetries(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tally.Sent != 1 || len(rc.requests()) != 1 {
		t.Fatalf("retry lane: %+v, %d requests; want the delivery sent when due", tally, len(rc.requests()))
	}
}
