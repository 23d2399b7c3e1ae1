package webhook

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
)

// Event and deliveries are created in one transaction, born leased: the
// retry worker cannot claim a delivery inside its birth lease.
func TestDispatchFromOutbox_BornLeased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)

	all := createEndpoint(t, pool, rc.URL+"/all")
	typed := createEndpoint(t, pool, rc.URL+"/typed", "invoice.paid", "invoice.voided")
	createEndpoint(t, pool, rc.URL+"/other", "customer.created")
	off := createEndpoint(t, pool, rc.URL+"/off")
	if err := DisableEndpoint(ctx, pool, off.ID, ""); err != nil {
		t.Fatal(err)
	}

	id := insertOutbox(t, pool, "invoice.paid", map[string]any{"invoice": "in_1"})
	before := dbNow(t, pool)
	d, err := p.DispatchFromOutbox(ctx, id)
	if err != nil {
		t.Fatalf("DispatchFromOutbox: %v", err)
	}
	if d.Deliveries != 2 {
		t.Fatalf("Deliveries = %d, want 2 (the all-types and the subscribed endpoint)", d.Deliveries)
	}

	ds := deliveries(t, pool, `event_id = $1`, d.EventID)
	gotEndpoints := map[string]bool{}
	for _, dl := range ds {
		gotEndpoints[dl.EndpointID] = true
		if dl.Status != "pending" || dl.Attempts != 1 {
			t.Errorf("delivery %s: status %s attempts %d, want pending with attempts 1 (birth is the first claim)", dl.ID, dl.Status, dl.Attempts)
		}
		if dl.NextRetryAt == nil {
			t.Fatalf("delivery %s born with NULL next_retry_at: not leased", dl.ID)
		}
		if want := before.Add(leases.BirthLeaseWindow); !within(*dl.NextRetryAt, want, 5*time.Second) {
			t.Errorf("delivery %s next_retry_at = %s, want about %s (now + birth lease)", dl.ID, dl.NextRetryAt, want)
		}
	}
	if !gotEndpoints[all.ID] || !gotEndpoints[typed.ID] {
		t.Errorf("deliveries went to %v, want %s and %s", gotEndpoints, all.ID, typed.ID)
	}

	// The retry worker runs now, inside the birth lease: it takes nothing.
	claimed, _, err := p.claimRetries(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 0 {
		t.Fatalf("retry claim took %d deliveries inside their birth lease", len(claimed))
	}
	sum, err := p.DrainRetries(ctx, testWindow)
	if err != nil || sum.Claimed != 0 {
		t.Fatalf("Retry inside the birth lease: %+v, %v; want nothing claimed", sum, err)
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("receiver got %d requests; DispatchFromOutbox alone must not send", n)
	}
	for _, dl := range deliveries(t, pool, `event_id = $1`, d.EventID) {
		if dl.Attempts != 1 {
			t.Errorf("delivery %s attempts = %d after the retry pass, want 1", dl.ID, dl.Attempts)
		}
	}
}

// If the fan-out transaction fails, nothing of it exists: no event, no
// delivery, and the outbox row is still pending, to be fanned out again.
func TestDispatchFromOutbox_AllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	id := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	boom := errors.New("crash before commit")
	p.hooks.afterFanOut = func(string) error { return boom }
	if _, err := p.DispatchFromOutbox(ctx, id); !errors.Is(err, boom) {
		t.Fatalf("DispatchFromOutbox = %v, want the injected failure", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1 AND status = 'pending' AND dispatched_at IS NULL`, id); n != 1 {
		t.Fatal("outbox row marked dispatched although its fan-out rolled back")
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events`); n != 0 {
		t.Fatalf("%d events survive a rolled-back fan-out", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries`); n != 0 {
		t.Fatalf("%d deliveries survive a rolled-back fan-out", n)
	}

	p.hooks.afterFanOut = nil
	if _, err := p.DispatchFromOutbox(ctx, id); err != nil {
		t.Fatalf("second fan-out: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries`); n != 1 {
		t.Fatalf("%d deliveries after the second fan-out, want 1", n)
	}
}

// The handler owns the mark: the outbox row is dispatched by the fan-out's
// own transaction, a replayed tick re-claims nothing, and there is exactly
// one event — also when a dispatcher whose lease expired comes back late.
func TestDispatchFromOutbox_HandlerOwnsMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)

	t.Run("dispatched atomically", func(t *testing.T) {
		id := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
		if _, err := p.DispatchFromOutbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		// No backstop has run: the mark must be the fan-out's own.
		if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1 AND status = 'dispatched' AND dispatched_at IS NOT NULL`, id); n != 1 {
			t.Fatal("outbox row not dispatched by the fan-out transaction itself")
		}
		if _, err := p.DispatchFromOutbox(ctx, id); !errors.Is(err, ErrStaleOutboxMark) {
			t.Fatalf("second DispatchFromOutbox = %v, want ErrStaleOutboxMark", err)
		}
		// A tick replayed after a crash (River rescues and re-runs it)
		// finds nothing to claim, even with the row's lease long gone.
		if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET next_attempt_at = now() - interval '1 hour' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		sum, err := p.Drain(ctx, testWindow)
		if err != nil || sum.Claimed != 0 {
			t.Fatalf("replayed tick: %+v, %v; want nothing claimed", sum, err)
		}
		if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE outbox_id = $1`, id); n != 1 {
			t.Fatalf("%d events for one outbox row, want exactly 1", n)
		}
	})

	t.Run("two fan-outs of one row at once", func(t *testing.T) {
		// A row fanned out twice at the same moment — an operator's
		// DispatchFromOutbox beside a lane's claim, two replicas' row-by-row
		// fallbacks — yields one event: the second waits for the first's
		// row lock, then finds the row dispatched and makes nothing.
		for i := range 20 {
			id := insertOutbox(t, pool, "invoice.paid", map[string]any{"race": i})
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for j := range errs {
				wg.Go(func() { _, errs[j] = p.DispatchFromOutbox(ctx, id) })
			}
			wg.Wait()
			stale := 0
			for _, err := range errs {
				switch {
				case errors.Is(err, ErrStaleOutboxMark):
					stale++
				case err != nil:
					t.Fatal(err)
				}
			}
			if stale != 1 {
				t.Fatalf("two fan-outs of row %s: %v; want one stale mark", id, errs)
			}
			if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE outbox_id = $1`, id); n != 1 {
				t.Fatalf("%d events for one outbox row, want exactly 1", n)
			}
		}
	})
}

// ProcessBatch fans out and makes the first attempts in process: a plain
// INSERT ends as a succeeded delivery without the retry worker.
func TestProcessBatch_FirstAttemptInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	for range 3 {
		createEndpoint(t, pool, rc.URL)
	}
	for i := range 7 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Claimed != 7 || sum.Events != 7 || sum.Sent != 21 || sum.Started != 21 ||
		sum.Failed+sum.Retried+sum.Released+sum.Stale+sum.MarkErrors+sum.Panics != 0 {
		t.Fatalf("Drain = %+v, want 7 claimed, 7 events, 21 sent and nothing else", sum)
	}
	if n := len(rc.requests()); n != 21 {
		t.Fatalf("receiver got %d requests, want 21", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded' AND attempts = 1 AND delivered_at IS NOT NULL`); n != 21 {
		t.Fatalf("%d deliveries succeeded on their first attempt, want 21", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_delivery_attempts WHERE attempt = 1 AND status_code = 204`); n != 21 {
		t.Fatalf("%d attempt rows, want 21", n)
	}
}

// A first attempt that cannot start while a whole DeliveryBudget still fits
// in its birth lease is not made in process: the delivery is released to
// the retry worker, so the two never overlap.
func TestProcessBatch_DefersAttemptsThatWouldOutliveTheBirthLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	// No room left once born: a lease NewDispatcher refuses
	// (ValidateAttempts), as a delivery born while every slot is held
	// until too late would find it.
	p.lc.BirthLeaseWindow = p.lc.DeliveryBudget + leases.MarkTimeout
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Released != 1 || sum.Sent != 0 {
		t.Fatalf("ProcessBatch = %+v, want the attempt deferred", sum)
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("receiver got %d requests, want 0", n)
	}
	// Released, so the retry worker takes it now rather than after the lease.
	sum, err = p.DrainRetries(ctx, testWindow)
	if err != nil || sum.Sent != 1 {
		t.Fatalf("Retry = %+v, %v; want the deferred delivery sent", sum, err)
	}
}

// After Stop nothing more is claimed; deliveries born but not started are
// released to the retry worker instead of waiting out their birth lease.
func TestPipeline_StopClaimsNothingMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})

	// The stop lands while the first batch is being fanned out.
	p.hooks.beforeDispatch = func(string) { p.Stop() }
	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Events != 2 || sum.Released != 2 || sum.Sent != 0 {
		t.Fatalf("Drain across a stop = %+v, want the claimed rows fanned out and their deliveries released", sum)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND next_retry_at <= now()`); n != 2 {
		t.Fatalf("%d deliveries due for the retry worker, want 2", n)
	}
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 3})
	if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Claimed != 0 {
		t.Fatalf("ProcessBatch after Stop = %+v, %v; want nothing claimed", sum, err)
	}
	if sum, err := p.DrainRetries(ctx, testWindow); err != nil || sum.Claimed != 0 {
		t.Fatalf("Retry after Stop = %+v, %v; want nothing claimed", sum, err)
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("receiver got %d requests after Stop", n)
	}
}

// A claim that fans out more first attempts than there are free slots
// leaves the rest waiting for a slot only while a whole attempt and its
// mark still fit in their birth lease; one that gets no slot in time is
// released to the retry worker at once, not left leased to nobody.
func TestLane_AttemptWithNoSlotInItsLeaseIsReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(c *Config) { c.Settings.Concurrency = 1 })
	// Two seconds of room to start in: the first attempt, which holds the
	// one slot for five, outlasts it.
	p.lc.BirthLeaseWindow = p.lc.DeliveryBudget + leases.MarkTimeout + 2*time.Second
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(5 * time.Second) // simulates: a receiver slower than the second attempt's room to start in
		w.WriteHeader(http.StatusNoContent)
	})
	provenEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})

	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Events != 2 || sum.Sent != 1 || sum.Released != 1 {
		t.Fatalf("Drain = %+v, want both fanned out, one sent and the other released", sum)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND next_retry_at <= now() AND leased_until IS NULL`); n != 1 {
		t.Fatalf("%d deliveries due for the retry worker, want the released one", n)
	}
}
