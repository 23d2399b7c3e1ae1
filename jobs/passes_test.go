package jobs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// One pass pool-wide (see docs/design/outbox-transport.md, Retry gating), for
// real: while one replica's retry pass (or prune) runs, a pass started on
// another replica runs nothing — a prune returns at once, a retry pass once
// its own window has closed with the gate still held (the first pass's
// claim is still running: its window closed too, but it hands the gate on
// only once its last claim has returned) — its output naming the holder;
// once the first is done, the next one runs. The first pass is held mid-run
// by a lock on the table it works, so the overlap is certain, not a matter
// of timing.
func TestPasses_OnePassPoolWideAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	newPasses := func(owner string) *Passes {
		p, err := webhook.NewDispatcher(pool, webhook.Config{Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		return NewPasses(p, pool, PassesConfig{Owner: owner, RetryInterval: time.Second, Logger: discard})
	}
	a, b := newPasses("replica-a"), newPasses("replica-b")
	for _, pass := range []struct {
		name, gate, table string
		run               func(*Passes, context.Context) (PassOutput, error)
	}{
		{"retry", GateWebhookRetry, "webhook_deliveries", (*Passes).Retry},
		{"prune", GateWebhookPrune, "webhook_outbox", (*Passes).Prune},
	} {
		t.Run(pass.name, func(t *testing.T) {
			lock, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback(ctx) //nolint:errcheck // released below
			if _, err := lock.Exec(ctx, "LOCK TABLE "+pass.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
			first := make(chan PassOutput, 1)
			go func() {
				out, err := pass.run(a, ctx)
				if err != nil {
					t.Error(err)
				}
				first <- out
			}()
			eventually.Until(t, "the first pass holds the gate", jobsWait, func() bool {
				return scalar[int](t, pool, `SELECT count(*) FROM postbox_gates WHERE name = $1`, pass.gate) == 1
			})
			// Bounded: a second pass that ran (no gate) would block on the lock.
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			out, err := pass.run(b, bctx)
			cancel()
			if err != nil || out.Held == "" || !strings.Contains(out.Held, "replica-a") {
				t.Fatalf("second pass while the first runs: %+v, %v; want it to run nothing, naming replica-a", out, err)
			}
			select {
			case o := <-first:
				t.Fatalf("the first pass finished (%+v) while its table was locked: the overlap did not happen", o)
			default:
			}
			if err := lock.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if o := <-first; o.Held != "" {
				t.Fatalf("first pass %+v, want it run", o)
			}
			if out, err := pass.run(b, ctx); err != nil || out.Held != "" {
				t.Fatalf("a pass after the first finished: %+v, %v; want it run", out, err)
			}
		})
	}
}

// The retry pass delivers a delivery that came due.
func TestPasses_RetryDeliversDueDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	got := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		got <- struct{}{}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	p, err := webhook.NewDispatcher(pool, webhook.Config{Settings: cfg, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.CreateEndpoint(ctx, pool, cfg, webhook.EndpointParams{URL: srv.URL}); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		id, err = webhook.Enqueue(ctx, tx, "invoice.paid", []byte(`{}`))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DispatchFromOutbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now()`); err != nil {
		t.Fatal(err)
	}
	out, err := NewPasses(p, pool, PassesConfig{Owner: "r", RetryInterval: 300 * time.Millisecond, Logger: discard}).Retry(ctx)
	if err != nil || out.Tally == nil || out.Tally.Sent != 1 {
		t.Fatalf("Retry = %+v, %v; want one delivery sent", out, err)
	}
	<-got
}

// Three replicas' retry passes, started an interval apart the way River's
// leader inserts them, hand the gate from one to the next without a gap
// (see docs/design/outbox-transport.md, Retry gating): each pass after the
// first is waiting when its predecessor's window closes, and takes the gate
// as soon as it is released — the lease is an hour, so only the release
// lets it in — while the predecessor's last attempt is still in flight.
// The lane claims throughout: deliveries due every 100 ms across all three
// turns are each sent once, by the pass holding the gate when they came due
// or the next.
func TestPasses_RetryHandsOverWithoutAGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const interval = 2 * time.Second
	heldBy := func(owner string) bool {
		return scalar[int](t, pool, `SELECT count(*) FROM postbox_gates WHERE name = $1 AND holder LIKE $2`, GateWebhookRetry, owner+"/%") == 1
	}
	var (
		mu        sync.Mutex
		sent      = map[string]int{}
		first     = true
		bTook     = make(chan struct{}) // b was seen holding while a's attempt was in flight
		bReturned = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent[r.Header.Get(webhook.HeaderID)]++
		block := first
		first = false
		mu.Unlock()
		if block {
			// a's first attempt stays in flight until b holds the gate
			// (or b's pass gave up: the test then fails below).
			for !heldBy("replica-b") {
				select {
				case <-bReturned:
					w.WriteHeader(http.StatusNoContent)
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			close(bTook)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ep, err := webhook.CreateEndpoint(ctx, pool, cfg, webhook.EndpointParams{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	// Due every 100 ms over the three turns (three intervals and the last
	// overlap).
	const n = 70
	if _, err := pool.Exec(ctx, `WITH ev AS (
	INSERT INTO webhook_events (event_type, payload) SELECT 'invoice.paid', jsonb_build_object('i', i) FROM generate_series(0, $2 - 1) i RETURNING id, (payload->>'i')::int AS i)
INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at)
SELECT id, $1, 1, now() + i * interval '100 milliseconds' FROM ev`, ep.ID, n); err != nil {
		t.Fatal(err)
	}
	newDispatcher := func() *webhook.Dispatcher {
		p, err := webhook.NewDispatcher(pool, webhook.Config{Settings: cfg, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	newPasses := func(owner string) *Passes {
		passes := NewPasses(newDispatcher(), pool, PassesConfig{Owner: owner, RetryInterval: interval, Logger: discard})
		passes.retryLease = time.Hour
		return passes
	}
	owners := []string{"replica-a", "replica-b", "replica-c"}
	outs := make([]PassOutput, len(owners))
	var wg sync.WaitGroup
	for i, owner := range owners {
		passes := newPasses(owner)
		wg.Go(func() {
			out, err := passes.Retry(ctx)
			if err != nil {
				t.Error(err)
			}
			outs[i] = out
			if owner == "replica-b" {
				close(bReturned)
			}
		})
		// The leader's cadence: an ordering (each pass starts while the
		// previous one's window is open), not a speed.
		time.Sleep(interval) // simulates: River's leader starting the next replica's pass an interval later
	}
	wg.Wait()

	total := 0
	for i, out := range outs {
		if out.TakenAt == nil || out.ReleasedAt == nil || out.Tally == nil {
			t.Fatalf("%s's pass %+v: want it to have waited for the gate and taken it", owners[i], out)
		}
		if i > 0 && !outs[i-1].ReleasedAt.Before(*out.TakenAt) {
			t.Errorf("%s took the gate at %v, before %s released it at %v: two holders", owners[i], out.TakenAt, owners[i-1], outs[i-1].ReleasedAt)
		}
		if out.Tally.Sent == 0 {
			t.Errorf("%s's turn sent nothing: %+v", owners[i], out.Tally)
		}
		total += out.Tally.Sent
	}
	select {
	case <-bTook:
	default:
		t.Error("replica-b did not take the gate while replica-a's attempt was in flight: the hand-over waited for a's attempts")
	}
	// The last deliveries come due in the last moments of c's window: on
	// a busy machine its final claim can return before they are due, and
	// the next pass takes them. One more drain stands in for that pass, so
	// the count below asks only that nothing is lost or sent twice, not
	// that the three windows kept up with the clock.
	next, err := newDispatcher().DrainRetries(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	total += next.Sent
	mu.Lock()
	defer mu.Unlock()
	if total != n || len(sent) != n {
		t.Fatalf("passes sent %d (the drain after them %d), receiver saw %d deliveries; want each of %d", total, next.Sent, len(sent), n)
	}
	for id, k := range sent {
		if k != 1 {
			t.Errorf("delivery of event %s sent %d times", id, k)
		}
	}
}
