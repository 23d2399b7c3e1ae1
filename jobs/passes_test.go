package jobs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbox/postbox/internal/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// One pass pool-wide (see docs/design/outbox-transport.md, Retry gating), for
// real: while one replica's retry pass (or prune) runs, a pass started on
// another replica returns at once, its output naming the holder; once the
// first is done, the next one runs. The first pass is held mid-run by a lock
// on the table it works, so the overlap is certain, not a matter of timing.
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
			waitFor(t, "the first pass holds the gate", func() bool {
				return scalar[int](t, pool, `SELECT count(*) FROM postbox_gates WHERE name = $1`, pass.gate) == 1
			})
			// Bounded: a second pass that ran (no gate) would block on the lock.
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			out, err := pass.run(b, bctx)
			cancel()
			if err != nil || out.Held == "" || !strings.Contains(out.Held, "replica-a") {
				t.Fatalf("second pass while the first runs: %+v, %v; want it to return at once, naming replica-a", out, err)
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
