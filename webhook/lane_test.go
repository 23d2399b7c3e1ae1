package webhook

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// WEBHOOK_CONCURRENCY (Settings.Concurrency) is the most HTTP attempts in
// flight in one Dispatcher however many drains and retry passes run at once.
func TestPipeline_ConcurrencyCapsAttemptsAcrossConcurrentRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var inFlight, peak atomic.Int32
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond) // simulates: a receiver taking a few milliseconds, so attempts overlap
		w.WriteHeader(http.StatusNoContent)
	})
	for range 4 {
		createEndpoint(t, pool, rc.URL)
	}
	for i := range 20 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	const limit = 2
	p := newDispatcher(t, pool, func(o *Config) { o.Settings.Concurrency = limit })
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := p.Drain(ctx, testWindow); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() {
		if _, err := p.DrainRetries(ctx, testWindow); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	// Whatever the drains deferred, the retry pass finishes.
	for count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`) > 0 {
		if _, err := p.DrainRetries(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(rc.requests()); n < 80 {
		t.Fatalf("receiver got %d requests, want 80", n)
	}
	if pk := peak.Load(); pk > limit || p.Slots().Peak() > limit {
		t.Errorf("%d attempts in flight at once (slots peaked at %d), want at most Concurrency = %d", pk, p.Slots().Peak(), limit)
	}
	if peak.Load() < limit {
		t.Errorf("peak %d: the runs never overlapped; the test proves nothing", peak.Load())
	}
}

// A panic in a webhook goroutine — a first attempt started by a fan-out,
// the fan-out turning its deliveries into attempts, a retry-pass attempt —
// is recorded on its delivery with the panic value and counted in the
// Tally; the process lives on.
func TestPipeline_PanicAtEverySiteIsRecordedAndCounted(t *testing.T) {
	t.Parallel()
	for _, site := range []string{"first attempt", "fan-out", "retry attempt"} {
		t.Run(site, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			rc := newReceiver(t, nil)
			createEndpoint(t, pool, rc.URL)
			outboxID := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
			p := newDispatcher(t, pool, nil)
			boom := site + " exploded"
			var once sync.Once
			switch site {
			case "first attempt", "retry attempt":
				p.hooks.beforeAttempt = func(string) { once.Do(func() { panic(boom) }) }
			case "fan-out":
				p.hooks.beforeDispatch = func(string) { once.Do(func() { panic(boom) }) }
			}
			if site == "retry attempt" {
				// Fan out without a first attempt; the retry pass makes it.
				if _, err := p.DispatchFromOutbox(ctx, outboxID); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now()`); err != nil {
					t.Fatal(err)
				}
			}
			var res Tally
			var err error
			if site == "retry attempt" {
				res, err = p.DrainRetries(ctx, testWindow)
			} else {
				res, err = p.Drain(ctx, testWindow)
			}
			if err != nil || res.Panics != 1 || !strings.Contains(strings.Join(res.Errors, "; "), "panic: "+boom) {
				t.Fatalf("run = %+v, %v; want one panic recorded with its value", res, err)
			}
			d := oneDelivery(t, pool, "TRUE")
			if d.Status != "pending" || !strings.Contains(str(d.LastError), "panic: "+boom) {
				t.Errorf("delivery %s, last_error %q; want pending for a retry, with the panic value", d.Status, str(d.LastError))
			}
		})
	}
}
