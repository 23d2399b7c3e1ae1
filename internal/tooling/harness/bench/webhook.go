package bench

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/webhook"
)

// webhook fans Events events out to Endpoints loopback receivers: the
// events are enqueued first (webhook.Enqueue, one transaction each), then
// Pipeline.Drain runs until every event is dispatched and every first
// attempt recorded. With LimitedRate, one more endpoint is rate-limited:
// its deliveries are born held and the retry lane sends them, at its rate,
// during the drain. Then every delivery is made due again as a retry
// backlog, the limited endpoint's rows at its head, and the retry lane
// drains it: the unlimited endpoints' rate there is what the claim's
// skipping of throttled rows buys.
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
	var limitedID *string // nil: none
	limitedRC := startReceivers(1)
	defer limitedRC.close()
	if rate := r.opts.LimitedRate; rate > 0 {
		ep, err := webhook.CreateEndpoint(ctx, pool, cfg, webhook.EndpointParams{URL: limitedRC.servers[0].URL})
		if err != nil {
			return fmt.Errorf("webhook: create endpoint: %w", err)
		}
		if err := webhook.SetLimits(ctx, pool, ep.ID, webhook.Limits{RateLimit: &rate}); err != nil {
			return err
		}
		limitedID = &ep.ID
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
	// The retry lane runs beside the drain, as on a replica: it sends the
	// limited endpoint's held deliveries.
	retryCtx, stopRetries := context.WithCancel(ctx)
	retried := make(chan struct{})
	go func() {
		defer close(retried)
		for retryCtx.Err() == nil {
			_, _ = p.RunRetries(retryCtx, time.Second)
		}
	}()
	var sum webhook.Tally
	start := time.Now()
	for sum.Events < events {
		s, err := p.Drain(ctx, 30*time.Second)
		if err != nil {
			stopRetries()
			return fmt.Errorf("webhook drain: %w", err)
		}
		if s.Claimed == 0 {
			stopRetries()
			return checkf("webhook: drain claimed nothing with %d of %d events dispatched", sum.Events, events)
		}
		sum.Add(s)
	}
	elapsed := time.Since(start)
	stopRetries()
	<-retried
	limitedGot, _ := limitedRC.counts()

	want := events * endpoints
	total, distinct := rc.counts()
	var succeeded, attempts int
	var p50, p99 float64
	if err := pool.QueryRow(ctx, `WITH a AS (
  SELECT a.duration_ms FROM webhook_delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
  WHERE d.endpoint_id IS DISTINCT FROM $1::uuid)
SELECT
  (SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded' AND endpoint_id IS DISTINCT FROM $1::uuid),
  (SELECT count(*) FROM a),
  (SELECT coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms), 0) FROM a),
  (SELECT coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY duration_ms), 0) FROM a)`, limitedID).
		Scan(&succeeded, &attempts, &p50, &p99); err != nil {
		return err
	}
	if succeeded != want || total != want || distinct != want || attempts != want {
		return checkf("webhook: %d deliveries succeeded in the table, %d in the drain, %d attempts; receivers got %d (%d distinct); want %d (summary %+v)",
			succeeded, sum.Sent, attempts, total, distinct, want, sum)
	}
	rate := perSecond(want, elapsed)
	path := fmt.Sprintf("Pipeline.Drain, %d events × %d endpoints", events, endpoints)
	notes := fmt.Sprintf("%d events dispatched, %d deliveries succeeded, receivers got %d, 0 duplicates; %.2f s", sum.Events, succeeded, total, elapsed.Seconds())
	if limitedID != nil {
		path += fmt.Sprintf(" + 1 limited to %v/s", r.opts.LimitedRate)
		notes += fmt.Sprintf("; the limited endpoint got %d meanwhile (%.1f/s)", limitedGot, perSecond(limitedGot, elapsed))
	}
	r.add(Row{Section: "webhook fan-out", Path: path, Figure: fmtRate(rate), Unit: "deliveries/s", Value: rate, Notes: notes})
	r.add(Row{Section: "webhook fan-out", Path: "attempt duration (webhook_delivery_attempts)",
		Figure: fmt.Sprintf("%.0f / %.0f", p50, p99), Unit: "ms p50/p99",
		Notes: "duration_ms is whole milliseconds: sign, POST, response read, over loopback"})
	return r.webhookBacklog(ctx, pool, p, limitedID, want, limitedRC)
}

// webhookBacklog makes every delivery due again — the limited endpoint's
// rows oldest, at the head of the claim's index — and runs the retry lane
// until the unlimited endpoints' rows are all sent again.
func (r *runner) webhookBacklog(ctx context.Context, pool *pgxpool.Pool, p *webhook.Dispatcher, limitedID *string, want int, limitedRC *receivers) error {
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'pending', delivered_at = NULL, leased_until = NULL,
	next_retry_at = now() - CASE WHEN endpoint_id = $1::uuid THEN interval '1 hour' ELSE interval '1 minute' END`, limitedID); err != nil {
		return fmt.Errorf("webhook backlog: %w", err)
	}
	if err := r.settle(ctx, pool, "webhook_deliveries"); err != nil {
		return err
	}
	limitedBefore, _ := limitedRC.counts()
	var limitedRows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1::uuid`, limitedID).Scan(&limitedRows); err != nil {
		return err
	}
	pending := func() (n int, err error) {
		err = pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND endpoint_id IS DISTINCT FROM $1::uuid`, limitedID).Scan(&n)
		return n, err
	}
	r.logf("webhook: retry backlog")
	start := time.Now()
	for {
		n, err := pending()
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return checkf("webhook backlog: %d unlimited deliveries still pending after 10 min", n)
		}
		if _, err := p.RunRetries(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("webhook backlog: %w", err)
		}
	}
	elapsed := time.Since(start)
	limitedAfter, _ := limitedRC.counts()
	rate := perSecond(want, elapsed)
	path := fmt.Sprintf("retry backlog, %d deliveries", want)
	notes := fmt.Sprintf("RunRetries until every unlimited delivery is sent again; %.2f s", elapsed.Seconds())
	if limitedID != nil {
		path += fmt.Sprintf(", the limited endpoint's %d rows at the head", limitedRows)
		notes += fmt.Sprintf("; the limited endpoint got %d meanwhile (%.1f/s)", limitedAfter-limitedBefore, perSecond(limitedAfter-limitedBefore, elapsed))
	}
	r.add(Row{Section: "webhook fan-out", Path: path, Figure: fmtRate(rate), Unit: "deliveries/s", Value: rate, Notes: notes})
	return nil
}
