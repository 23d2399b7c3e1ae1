package webhook

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
)

// interruptedReplays is the operator's view of replays cut between their
// two steps: clones with no delivery at all.
const interruptedReplays = `SELECT count(*) FROM webhook_events c
WHERE replay_of IS NOT NULL AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = c.id)`

// Replaying an event commits a clone linked by replay_of, creates its
// born-leased deliveries and sends them; an interrupted replay is visible
// and running it again completes the same clone.
func TestReplayEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	createEndpoint(t, pool, rc.URL+"/other-type", "customer.created")
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Sent != 1 {
		t.Fatalf("original delivery: %+v, %v", sum, err)
	}
	var original string
	if err := pool.QueryRow(ctx, `SELECT id FROM webhook_events`).Scan(&original); err != nil {
		t.Fatal(err)
	}

	t.Run("clone with born-leased deliveries", func(t *testing.T) {
		before := dbNow(t, pool)
		rep, err := p.ReplayEvent(ctx, original)
		if err != nil {
			t.Fatal(err)
		}
		if rep.EventID == original || rep.ReplayOf != original || rep.Resumed || rep.Deliveries != 1 || rep.Attempts.Sent != 1 {
			t.Fatalf("ReplayEvent = %+v, want a new clone delivered to the one subscribed endpoint", rep)
		}
		if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE id = $1 AND replay_of = $2 AND outbox_id IS NULL`, rep.EventID, original); n != 1 {
			t.Fatal("clone not linked to the original by replay_of")
		}
		d := oneDelivery(t, pool, `event_id = $1`, rep.EventID)
		if d.Attempts != 1 || d.NextRetryAt == nil || !within(*d.NextRetryAt, before.Add(leases.BirthLeaseWindow), 5*time.Second) {
			t.Fatalf("clone delivery: attempts %d next_retry_at %v, want born leased", d.Attempts, d.NextRetryAt)
		}
		reqs := rc.requests()
		if got := reqs[len(reqs)-1].Header.Get(HeaderID); got != rep.EventID {
			t.Fatalf("replay sent webhook-id %q, want the clone's id %q", got, rep.EventID)
		}
		if string(reqs[0].Body[strings.Index(string(reqs[0].Body), `"data"`):]) !=
			string(reqs[len(reqs)-1].Body[strings.Index(string(reqs[len(reqs)-1].Body), `"data"`):]) {
			t.Fatal("replay sent different data")
		}
	})

	t.Run("interrupted, then run again", func(t *testing.T) {
		boom := errors.New("killed between the steps")
		p.hooks.afterReplayClone = func([]string) error { return boom }
		rep, err := p.ReplayEvent(ctx, original)
		p.hooks.afterReplayClone = nil
		if !errors.Is(err, boom) {
			t.Fatalf("ReplayEvent = %v, want the interruption", err)
		}
		if n := count(t, pool, interruptedReplays); n != 1 {
			t.Fatalf("%d interrupted replays visible, want 1", n)
		}
		again, err := p.ReplayEvent(ctx, original)
		if err != nil {
			t.Fatal(err)
		}
		if !again.Resumed || again.EventID != rep.EventID || again.Deliveries != 1 || again.Attempts.Sent != 1 {
			t.Fatalf("re-run = %+v, want clone %s completed and delivered", again, rep.EventID)
		}
		if n := count(t, pool, interruptedReplays); n != 0 {
			t.Fatalf("%d interrupted replays left", n)
		}
		if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE replay_of = $1`, original); n != 2 {
			t.Fatalf("%d clones of the original, want 2 (one per completed replay)", n)
		}
	})

	t.Run("given a clone, replays the original", func(t *testing.T) {
		var clone string
		if err := pool.QueryRow(ctx, `SELECT id FROM webhook_events WHERE replay_of = $1 LIMIT 1`, original).Scan(&clone); err != nil {
			t.Fatal(err)
		}
		rep, err := p.ReplayEvent(ctx, clone)
		if err != nil {
			t.Fatal(err)
		}
		if rep.ReplayOf != original {
			t.Fatalf("replay of clone %s links to %s, want the original %s: families stay flat", clone, rep.ReplayOf, original)
		}
	})

	t.Run("unknown event", func(t *testing.T) {
		if _, err := p.ReplayEvent(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReplayEvent(unknown) = %v, want ErrNotFound", err)
		}
	})
}

// Replaying an endpoint's failed deliveries since a time clones exactly
// those events, sends them, and is idempotent; an interrupted run completes
// when run again.
func TestReplayFailedSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(o *Config) { o.Backoff = []time.Duration{} }) // one attempt, then failed
	rc, healthy := newFailingReceiver(t, http.StatusInternalServerError)
	ep := createEndpoint(t, pool, rc.URL)
	bystander := createEndpoint(t, pool, rc.URL+"/bystander")
	for i := range 4 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'`); n != 8 {
		t.Fatalf("%d failed deliveries, want 8", n)
	}
	// One failure is older than the window.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET created_at = now() - interval '2 days'
WHERE id = (SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at LIMIT 1)`, ep.ID); err != nil {
		t.Fatal(err)
	}
	healthy.Store(true)
	since := time.Now().Add(-24 * time.Hour)

	boom := errors.New("killed between the steps")
	p.hooks.afterReplayClone = func([]string) error { return boom }
	if _, err := p.ReplayFailedSince(ctx, ep.ID, since); !errors.Is(err, boom) {
		t.Fatalf("interrupted run = %v", err)
	}
	p.hooks.afterReplayClone = nil
	if n := count(t, pool, interruptedReplays); n != 3 {
		t.Fatalf("%d interrupted clones visible, want 3", n)
	}

	rb, err := p.ReplayFailedSince(ctx, ep.ID, since)
	if err != nil {
		t.Fatal(err)
	}
	if rb.Events != 3 || rb.Resumed != 3 || rb.Deliveries != 3 || rb.Attempts.Sent != 3 {
		t.Fatalf("ReplayFailedSince = %+v, want the 3 recent failures completed and delivered", rb)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE replay_of IS NOT NULL`); n != 3 {
		t.Fatalf("%d clones, want 3", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
WHERE e.replay_of IS NOT NULL AND d.endpoint_id = $1`, bystander.ID); n != 0 {
		t.Fatalf("replay to one endpoint created %d deliveries to another", n)
	}

	again, err := p.ReplayFailedSince(ctx, ep.ID, since)
	if err != nil || again.Events != 0 || again.Deliveries != 0 {
		t.Fatalf("second run = %+v, %v; want nothing replayed twice", again, err)
	}

	// One replay's delivery fails for good after all: the next run replays
	// that family once more, linked to the original, and only it.
	var failedClone, root string
	if err := pool.QueryRow(ctx, `UPDATE webhook_deliveries SET status = 'failed'
WHERE id = (SELECT d.id FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
	WHERE e.replay_of IS NOT NULL ORDER BY d.created_at LIMIT 1)
RETURNING event_id, (SELECT replay_of FROM webhook_events WHERE id = event_id)`).Scan(&failedClone, &root); err != nil {
		t.Fatal(err)
	}
	third, err := p.ReplayFailedSince(ctx, ep.ID, since)
	if err != nil || third.Events != 1 || third.Attempts.Sent != 1 {
		t.Fatalf("after a replay failed: %+v, %v; want that one family replayed", third, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE replay_of = $1`, root); n != 2 {
		t.Fatalf("family of %s has %d clones, want 2, both linked to the original", root, n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE replay_of = $1`, failedClone); n != 0 {
		t.Fatal("a clone was replayed as if it were an original")
	}

	if err := DisableEndpoint(ctx, pool, ep.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReplayFailedSince(ctx, ep.ID, since); err == nil || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("replay to a disabled endpoint = %v, want refused", err)
	}
}
