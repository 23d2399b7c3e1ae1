package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/webhook"
)

// receivers are loopback webhook endpoints that count what they get, per
// endpoint and webhook-id, so duplicates show.
type receivers struct {
	servers []*httptest.Server
	mu      sync.Mutex
	got     map[[2]string]int // {endpoint index, webhook-id} → deliveries
	total   int
}

func startReceivers(n int) *receivers {
	rc := &receivers{got: map[[2]string]int{}}
	for i := range n {
		idx := strconv.Itoa(i)
		rc.servers = append(rc.servers, httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			key := [2]string{idx, req.Header.Get("webhook-id")}
			rc.mu.Lock()
			rc.got[key]++
			rc.total++
			rc.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		})))
	}
	return rc
}

func (rc *receivers) close() {
	for _, s := range rc.servers {
		s.Close()
	}
}

func (rc *receivers) counts() (total, distinct int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.total, len(rc.got)
}

// webhook fans Events events out to Endpoints loopback receivers: the
// events are enqueued first (webhook.Enqueue, one transaction each), then
// Pipeline.Drain runs until every event is dispatched and every first
// attempt recorded.
func (r *runner) webhook(ctx context.Context) error {
	events, endpoints := r.opts.Events, r.opts.Endpoints
	pool, err := r.pool(ctx, r.opts.PoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	rc := startReceivers(endpoints)
	defer rc.close()

	cfg := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	p, err := webhook.NewDispatcher(pool, webhook.Config{Settings: cfg})
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	defer p.Close()
	for _, s := range rc.servers {
		if _, err := webhook.CreateEndpoint(ctx, pool, cfg, webhook.EndpointParams{URL: s.URL}); err != nil {
			return fmt.Errorf("webhook: create endpoint: %w", err)
		}
	}
	r.logf("webhook: enqueueing %d events for %d endpoints", events, endpoints)
	if _, _, err := parallel(ctx, events, r.opts.Clients, func(ctx context.Context, i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := webhook.Enqueue(ctx, tx, "invoice.paid",
				fmt.Appendf(nil, `{"invoice_id":"in_%d","amount_due":12000,"currency":"eur"}`, i))
			return err
		})
	}); err != nil {
		return fmt.Errorf("webhook enqueue: %w", err)
	}
	if err := r.settle(ctx, pool, "webhook_outbox", "webhook_endpoints"); err != nil {
		return err
	}

	r.logf("webhook: draining")
	var sum webhook.Tally
	start := time.Now()
	for sum.Events < events {
		s, err := p.Drain(ctx)
		if err != nil {
			return fmt.Errorf("webhook drain: %w", err)
		}
		if s.Claimed == 0 {
			return checkf("webhook: drain claimed nothing with %d of %d events dispatched", sum.Events, events)
		}
		sum.Add(s)
	}
	elapsed := time.Since(start)

	want := events * endpoints
	total, distinct := rc.counts()
	var succeeded, attempts int
	var p50, p99 float64
	if err := pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'),
  (SELECT count(*) FROM webhook_delivery_attempts),
  (SELECT coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms), 0) FROM webhook_delivery_attempts),
  (SELECT coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY duration_ms), 0) FROM webhook_delivery_attempts)`).
		Scan(&succeeded, &attempts, &p50, &p99); err != nil {
		return err
	}
	if sum.Sent != want || succeeded != want || total != want || distinct != want || attempts != want {
		return checkf("webhook: %d deliveries succeeded in the table, %d in the drain, %d attempts; receivers got %d (%d distinct); want %d (summary %+v)",
			succeeded, sum.Sent, attempts, total, distinct, want, sum)
	}
	rate := perSecond(want, elapsed)
	r.add(Row{Section: "webhook fan-out", Path: fmt.Sprintf("Pipeline.Drain, %d events × %d endpoints", events, endpoints),
		Figure: fmtRate(rate), Unit: "deliveries/s", Value: rate,
		Notes: fmt.Sprintf("%d events dispatched, %d deliveries succeeded, receivers got %d, 0 duplicates; %.2f s", sum.Events, succeeded, total, elapsed.Seconds())})
	r.add(Row{Section: "webhook fan-out", Path: "attempt duration (webhook_delivery_attempts)",
		Figure: fmt.Sprintf("%.0f / %.0f", p50, p99), Unit: "ms p50/p99",
		Notes: "duration_ms is whole milliseconds: sign, POST, response read, over loopback"})
	return nil
}
