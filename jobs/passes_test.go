package jobs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbox/postbox/internal/pgtest"
	"github.com/postbox/postbox/webhook"
)

// ADR-072 decision 7 for real: two retry passes started at once on two
// replicas — one runs, the other returns at once, its output naming the
// holder. Likewise for the pruner.
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
		name string
		run  func(*Passes, context.Context) (PassOutput, error)
	}{{"retry", (*Passes).Retry}, {"prune", (*Passes).Prune}} {
		t.Run(pass.name, func(t *testing.T) {
			var wg sync.WaitGroup
			outs := make([]PassOutput, 2)
			done := make([]time.Time, 2)
			for i, p := range []*Passes{a, b} {
				wg.Go(func() {
					out, err := pass.run(p, ctx)
					if err != nil {
						t.Error(err)
					}
					outs[i], done[i] = out, time.Now()
				})
			}
			wg.Wait()
			held, ran := -1, -1
			for i, o := range outs {
				if o.Held != "" {
					held = i
				} else {
					ran = i
				}
			}
			if held < 0 || ran < 0 {
				t.Fatalf("outputs %+v: want one pass run and one told the gate is held", outs)
			}
			if !done[held].Before(done[ran]) {
				t.Errorf("the held pass returned after the running one finished: it waited instead of returning at once")
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
