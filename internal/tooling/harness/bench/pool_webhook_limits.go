package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/webhook"
)

// The pool-webhook-ratelimit and pool-webhook-retry sections' runs and
// aims.
const (
	hookRate         = 10.0 // the endpoint's rate_limit, requests/s
	hookRateOffered  = 20   // events/s offered to it
	hookRateWindow   = 5 * time.Second
	hookRateAimLow   = 45 // requests in every window after the first, at least
	hookRateAimHigh  = 55 // and at most
	hookRetryRate    = 20 // events/s offered to the retry section's receiver
	hookRetryScale   = "0.1"
	hookRetryAimP99  = time.Second
	hookRetrySettle  = time.Minute // beyond the load, for every retry to arrive
	hookLoadWorkers  = 8           // the load's goroutines (and pool connections)
	hookRetryDueName = "bench_retry_due"
)

// largestReplicas is the replica count of the webhook sections that run
// one: the most of WebhookReplicas.
func (o PoolOptions) largestReplicas() int { return slices.Max(o.WebhookReplicas) }

// offer runs the open-loop load of rate events/s for d against the
// running processes and returns the event ids.
func (pr *poolRunner) offer(ctx context.Context, rate int, d time.Duration) ([]string, error) {
	app, err := pr.pool(ctx, hookLoadWorkers)
	if err != nil {
		return nil, err
	}
	defer app.Close()
	commits, _, err := openLoop(ctx, rate, max(int(float64(rate)*d.Seconds()), 1), hookLoadWorkers, pr.eventLoad(app))
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(commits))
	for id := range commits {
		ids = append(ids, id)
	}
	return ids, nil
}

// webhookRateLimitSection offers hookRateOffered events/s for WebhookLoad
// to one endpoint limited to hookRate requests/s (webhook.SetLimits, the
// rate_limit column), answering at once, with the largest replica count,
// for every trial. It counts the requests the receiver got per second and
// per hookRateWindow from the first one, over WebhookLoad, and reads every
// window after the first against the aim; duplicates fail it.
func (pr *poolRunner) webhookRateLimitSection(ctx context.Context) error {
	if pr.po.WebhookLoad < 2*hookRateWindow {
		return fmt.Errorf("pool-webhook-ratelimit: --webhook-load %s leaves no %s window after the first; give at least %s", pr.po.WebhookLoad, hookRateWindow, 2*hookRateWindow)
	}
	return pr.trials(ctx, []int{pr.po.largestReplicas()}, func(ctx context.Context, _, rc int) error {
		label := fmt.Sprintf("%srate_limit=%g/s, %d events/s offered for %s", rp(rc), hookRate, hookRateOffered, pr.po.WebhookLoad)
		if err := pr.truncate(ctx); err != nil {
			return err
		}
		hooks := startReceivers(1)
		defer hooks.close()
		eps, err := pr.hookEndpoints(ctx, hooks)
		if err != nil {
			return err
		}
		rate := hookRate
		if err := webhook.SetLimits(ctx, pr.ctl, eps[0], webhook.Limits{RateLimit: &rate}); err != nil {
			return err
		}
		procs, _, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, "webhook ratelimit "+label)
		if err != nil {
			return err
		}
		defer stop()
		pr.logf("pool webhook ratelimit: %s", label)
		busy := machineBusy()
		if _, err := pr.offer(ctx, hookRateOffered, pr.po.WebhookLoad); err != nil {
			return fmt.Errorf("pool webhook ratelimit: %w", err)
		}
		hits := hooks.log()
		if len(hits) == 0 {
			return checkf("pool webhook ratelimit %s: nothing reached the receiver", label)
		}
		first := hits[0].at
		select { // the whole window after the first request
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(first.Add(pr.po.WebhookLoad + 500*time.Millisecond))):
		}
		cpu := machineBusy() - busy
		if err := anyExited("pool webhook ratelimit", procs); err != nil {
			return err
		}
		if total, distinct := hooks.counts(); total != distinct {
			return checkf("pool webhook ratelimit %s: %d duplicates", label, total-distinct)
		}
		hits = hooks.log()
		at := make([]time.Time, len(hits))
		for i, h := range hits {
			at[i] = h.at
		}
		seconds := countWindows(at, first, time.Second, int(pr.po.WebhookLoad/time.Second))
		windows := countWindows(at, first, hookRateWindow, int(pr.po.WebhookLoad/hookRateWindow))
		after := windows[min(1, len(windows)-1):]
		lo, hi := slices.Min(after), slices.Max(after)
		counted := 0
		for _, n := range windows {
			counted += n
		}
		shares, _ := fmtShares(perReplica(hits, rc)[:rc])
		pr.add(Row{Section: titlePoolWebhookRateLimit, Path: label + ": requests per 5 s window after the first", Figure: fmt.Sprintf("%d–%d", lo, hi),
			Unit: "requests (least–most)", Value: float64(lo),
			Notes: fmt.Sprintf("%s: the aim is %d–%d in every window; windows %s; %.1f requests/s over %s from the first; per replica %s; machine CPU %.2f ms per request; 0 duplicates",
				verdict(lo >= hookRateAimLow && hi <= hookRateAimHigh), hookRateAimLow, hookRateAimHigh, joinInts(windows), perSecond(counted, pr.po.WebhookLoad), pr.po.WebhookLoad,
				shares, float64(cpu.Microseconds())/1000/float64(max(len(hits), 1)))})
		pr.add(Row{Section: titlePoolWebhookRateLimit, Path: label + ": per second", Figure: fmt.Sprintf("%d–%d", slices.Min(seconds), slices.Max(seconds)),
			Unit: "requests (least–most)", Value: float64(slices.Max(seconds)), Notes: "from the first request: " + joinInts(seconds)})
		return nil
	})
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " ")
}

// The retry section learns when each retry was due from the row itself:
// a trigger, in the bench's own database only, logs every write of
// webhook_deliveries.next_retry_at that leaves the attempts count alone
// (claims count attempts, marks never do): the failure mark, and any
// throttle that pushes the row on. The last one logged before the retry
// is when it was due.
var retryDueSQL = []string{
	`CREATE TABLE ` + hookRetryDueName + ` (delivery_id uuid NOT NULL, attempts int NOT NULL, next_retry_at timestamptz, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE FUNCTION ` + hookRetryDueName + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ` + hookRetryDueName + ` (delivery_id, attempts, next_retry_at) VALUES (NEW.id, NEW.attempts, NEW.next_retry_at);
	RETURN NULL;
END $$`,
	`CREATE TRIGGER ` + hookRetryDueName + ` AFTER UPDATE OF next_retry_at ON webhook_deliveries FOR EACH ROW
WHEN (NEW.status = 'pending' AND NEW.attempts = OLD.attempts AND NEW.next_retry_at IS DISTINCT FROM OLD.next_retry_at)
EXECUTE FUNCTION ` + hookRetryDueName + `()`,
}

var dropRetryDueSQL = `DROP TRIGGER IF EXISTS ` + hookRetryDueName + ` ON webhook_deliveries;
DROP FUNCTION IF EXISTS ` + hookRetryDueName + `();
DROP TABLE IF EXISTS ` + hookRetryDueName

// webhookRetrySection offers hookRetryRate events/s for WebhookLoad to one
// endpoint whose receiver answers 500 to the first request of every
// delivery and 204 to the next, with RETRY_BACKOFF_SCALE=hookRetryScale
// (the first retry due 0.5 s after the failure), the breaker off and the
// largest replica count, for every trial. For each retry it takes the time from when it
// was due (retryDueSQL) to when the receiver saw it, and reports p50, p99
// and the most.
func (pr *poolRunner) webhookRetrySection(ctx context.Context) error {
	return pr.trials(ctx, []int{pr.po.largestReplicas()}, func(ctx context.Context, _, rc int) error {
		label := fmt.Sprintf("%sfirst attempt fails, %d events/s for %s, RETRY_BACKOFF_SCALE=%s, breaker off", rp(rc), hookRetryRate, pr.po.WebhookLoad, hookRetryScale)
		if err := pr.truncate(ctx); err != nil {
			return err
		}
		if _, err := pr.ctl.Exec(ctx, dropRetryDueSQL); err != nil {
			return err
		}
		for _, q := range retryDueSQL {
			if _, err := pr.ctl.Exec(ctx, q); err != nil {
				return fmt.Errorf("pool webhook retry: %w", err)
			}
		}
		defer func() { _, _ = pr.ctl.Exec(context.WithoutCancel(ctx), dropRetryDueSQL) }()
		hooks := startReceiversWith(1, receiverOptions{failFirst: true})
		defer hooks.close()
		if _, err := pr.hookEndpoints(ctx, hooks); err != nil {
			return err
		}
		// The breaker off: with it on, a receiver failing every first
		// attempt opens it, and this section would time the breaker's
		// cool-downs (pool-webhook-breaker's fail-first run) rather than
		// the retry lane.
		env := append([]string{"RETRY_BACKOFF_SCALE=" + hookRetryScale}, pr.po.BreakerOff...)
		procs, _, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, "webhook retry "+label, env...)
		if err != nil {
			return err
		}
		defer stop()
		pr.logf("pool webhook retry: %s", label)
		ids, err := pr.offer(ctx, hookRetryRate, pr.po.WebhookLoad)
		if err != nil {
			return fmt.Errorf("pool webhook retry: %w", err)
		}
		w, err := pr.waitHooks(ctx, hooks, len(ids), hookRetrySettle, "pool webhook retry: "+label, procs)
		if err != nil {
			return err
		}
		if w.got < len(ids) {
			return checkf("pool webhook retry %s: %d of %d delivered within %s of the load's end", label, w.got, len(ids), hookRetrySettle)
		}
		due, err := pr.retryDue(ctx)
		if err != nil {
			return err
		}
		lags, missing := retryLags(hooks.log(), due)
		if len(lags) == 0 {
			return checkf("pool webhook retry %s: no retry with a due time (%d without): did the failure mark stop writing next_retry_at?", label, missing)
		}
		ps := percentiles(lags, 50, 99, 100)
		pr.add(Row{Section: titlePoolWebhookRetry, Path: label, Figure: fmtMs(ps[0]) + " / " + fmtMs(ps[1]) + " / " + fmtMs(ps[2]),
			Unit: "ms p50/p99/max", Value: float64(ps[1]) / float64(time.Millisecond),
			Notes: fmt.Sprintf("%s: the aim is p99 ≤ %s; %d retries timed from webhook_deliveries.next_retry_at as the failure mark (or a throttle after it) last wrote it to the receiver's arrival, %d without one; all %d delivered",
				verdict(ps[1] <= hookRetryAimP99), hookRetryAimP99, len(lags), missing, len(ids))})
		return nil
	})
}

// retryDue is when each delivery's first retry was due, by event id (the
// webhook-id; the section has one endpoint): the last next_retry_at
// logged while its attempts count was 1.
func (pr *poolRunner) retryDue(ctx context.Context) (map[string]time.Time, error) {
	rows, err := pr.ctl.Query(ctx, `SELECT d.event_id::text, l.next_retry_at FROM `+hookRetryDueName+` l
JOIN webhook_deliveries d ON d.id = l.delivery_id WHERE l.attempts = 1 AND l.next_retry_at IS NOT NULL ORDER BY l.at`)
	if err != nil {
		return nil, fmt.Errorf("pool webhook retry: %w", err)
	}
	defer rows.Close()
	due := map[string]time.Time{}
	for rows.Next() {
		var (
			id string
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		due[id] = at // ordered: the last write wins
	}
	return due, rows.Err()
}

// retryLags is, for every second request of a delivery, its arrival less
// when it was due (due, by webhook-id); missing counts second requests
// with no due time.
func retryLags(hits []hit, due map[string]time.Time) (lags []time.Duration, missing int) {
	for _, h := range hits {
		if h.nth != 2 {
			continue
		}
		d, ok := due[h.key.id]
		if !ok {
			missing++
			continue
		}
		lags = append(lags, h.at.Sub(d))
	}
	return lags, missing
}
