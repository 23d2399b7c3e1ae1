package webhook

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A new endpoint that answers every request with a 500 gets no more first
// attempts than the cap (Settings.Concurrency) from three dispatchers
// fanning out to it and then running their retry lanes at once, however
// many events wait — whether the fan-outs birth the cap's worth leased or,
// their count already spent, birth every delivery held for the retry
// lanes' admission. Once it answers, everything held goes out, and it is
// proven.
func TestUnproven_NewEndpointGetsAtMostTheCapOfFirstAttempts(t *testing.T) {
	t.Parallel()
	const capped, events = 4, 30
	for _, tc := range []struct {
		name       string
		spent      int // unproven_births before the events
		unresolved int // deliveries already attempted, failed and waiting an hour
	}{
		{"born leased up to the cap", 0, 0},
		{"born held, admitted up to the cap", capped, 0},
		{"born held, admitted up to what the cap has left", capped, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ps := make([]*Dispatcher, 3)
			for i := range ps {
				ps[i] = newDispatcher(t, pool, func(c *Config) {
					c.Settings.Concurrency = capped
					c.Settings.BreakerMinRequests = maxBreakerMinRequests // the cap alone
					c.Backoff = []time.Duration{time.Hour}
				})
			}
			rc, up := newFailingReceiver(t, http.StatusInternalServerError)
			ep := createEndpoint(t, pool, rc.URL)
			if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET unproven_births = $2 WHERE id = $1`, ep.ID, tc.spent); err != nil {
				t.Fatal(err)
			}
			for range tc.unresolved {
				backlogDelivery(t, pool, ep.ID, 1, "1 hour", "-1 minute")
			}
			for i := range events {
				insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
			}
			// Every dispatcher fans out at once, then every retry lane
			// runs at once over what was born held.
			for _, drain := range []func(*Dispatcher) (Tally, error){
				func(p *Dispatcher) (Tally, error) { return p.Drain(ctx, testWindow) },
				func(p *Dispatcher) (Tally, error) { return p.DrainRetries(ctx, testWindow) },
			} {
				var wg sync.WaitGroup
				for _, p := range ps {
					wg.Go(func() {
						if _, err := drain(p); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
			}
			if got := len(rc.requests()); got == 0 || got > capped-tc.unresolved {
				t.Fatalf("the new endpoint got %d first attempts, want 1 to %d", got, capped-tc.unresolved)
			}
			if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints WHERE id = $1 AND paused_until IS NOT NULL`, ep.ID); n != 0 {
				t.Fatal("the breaker switched off opened")
			}
			if s := listedState(t, pool, ep.ID); s != "new" {
				t.Fatalf("the capped endpoint is listed %q, want new", s)
			}

			up.Store(true)
			if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now() WHERE attempts > 0`); err != nil {
				t.Fatal(err)
			}
			all := events + tc.unresolved
			for range 20 {
				if count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`) == all {
					break
				}
				if _, err := ps[0].DrainRetries(ctx, testWindow); err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`); n != all {
				t.Fatalf("%d of %d delivered once the endpoint answered", n, all)
			}
			if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints WHERE id = $1 AND proven_at IS NOT NULL`, ep.ID); n != 1 {
				t.Fatal("the endpoint that answered is not proven")
			}
			if s := listedState(t, pool, ep.ID); s != "closed" {
				t.Fatalf("the proven endpoint is listed %q, want closed", s)
			}
		})
	}
}

// listedState is the breaker state ListEndpoints shows for endpoint id.
func listedState(t *testing.T, db DB, id string) string {
	t.Helper()
	eps, err := ListEndpoints(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.ID == id {
			return e.Breaker.State
		}
	}
	t.Fatalf("endpoint %s not listed", id)
	return ""
}

// Fan-outs on two replicas at once count a new endpoint's leased births
// under its row's lock: the second waits for the first to commit and reads
// the count it left, so between them they birth no more leased than the
// cap. Here the cap has one left; the first fan-out takes it and holds its
// transaction open until the second is waiting on a lock.
func TestUnproven_FanOutsCountTheCapUnderTheEndpointsLock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	const capped = 4
	p := newDispatcher(t, pool, func(c *Config) { c.Settings.Concurrency = capped })
	other := newDispatcher(t, pool, func(c *Config) { c.Settings.Concurrency = capped })
	ep := createEndpoint(t, pool, "http://127.0.0.1:9/new")
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET unproven_births = $2 WHERE id = $1`, ep.ID, capped-1); err != nil {
		t.Fatal(err)
	}
	first := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	second := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	secondDone := make(chan error, 1)
	var secondReturned atomic.Bool
	p.hooks.afterFanOut = func(string) error {
		go func() {
			_, err := other.dispatch(context.Background(), second)
			secondReturned.Store(true)
			secondDone <- err
		}()
		// Until the second fan-out waits on a lock (this one's, on the
		// endpoint row), or returned without waiting.
		eventually.Until(t, "the second fan-out waiting on a lock, or done", time.Minute, func() bool {
			return secondReturned.Load() ||
				count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH claimed AS%'`) > 0
		})
		return nil
	}
	if _, err := p.dispatch(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND leased_until IS NOT NULL`, ep.ID); n != 1 {
		t.Fatalf("%d of the two deliveries born leased, want 1: the cap had one left", n)
	}
	if n := count(t, pool, `SELECT unproven_births FROM webhook_endpoints WHERE id = $1`, ep.ID); n != capped+1 {
		t.Fatalf("unproven_births = %d, want %d", n, capped+1)
	}
}

// A new endpoint whose first attempts, as many as its cap, all failed
// opens its breaker then, not at BreakerMinRequests: it gets no more first
// attempts than that to count, and its retries wait for the probes.
func TestUnproven_BreakerOpensOnceTheCapHasFailed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	const capped = 4
	p := newDispatcher(t, pool, func(c *Config) {
		c.Settings.Concurrency = capped
		c.Backoff = []time.Duration{time.Hour}
	})
	rc, _ := newFailingReceiver(t, http.StatusInternalServerError)
	ep := createEndpoint(t, pool, rc.URL)
	for i := range 10 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DrainRetries(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if got := len(rc.requests()); got != capped {
		t.Fatalf("the new endpoint got %d first attempts, want %d", got, capped)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints WHERE id = $1 AND paused_until > now()`, ep.ID); n != 1 {
		t.Fatalf("the breaker of a new endpoint whose %d first attempts failed is not open (BreakerMinRequests %d)", capped, DefaultBreakerMinRequests)
	}
}
