package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The breaker's settings as the pool-webhook-breaker section sets them.
// The breaker is being redesigned; when its settings change, these are
// the one place to follow them (BreakerOffEnv also by --breaker-off).
var (
	// BreakerOffEnv turns the endpoint circuit breaker off: a threshold no
	// run of the section reaches.
	BreakerOffEnv = []string{"WEBHOOK_BREAKER_MIN_REQUESTS=1000000"}
	// breakerShortCooldownEnv makes the always-failing run see many
	// cool-downs: a short one that does not grow.
	breakerShortCooldownEnv = []string{"WEBHOOK_BREAKER_COOLDOWN=2s", "WEBHOOK_BREAKER_MAX_COOLDOWN=2s"}
	breakerShortCooldown    = 2 * time.Second
)

// The section's loads and aims.
const (
	breakerRate      = 5 // events/s of the flaky and the fail-first runs
	breakerScale     = "0.05"
	breakerFlakySeed = 23
	breakerAimRatio  = 0.95
	// breakerSettle is the default wait after the flaky load: with
	// RETRY_BACKOFF_SCALE=0.05 the schedule's first three waits (5 s,
	// 5 min, 30 min) become 0.25 s, 15 s and 90 s, so by 105 s (+10 %
	// jitter: 116 s) after its first attempt every delivery has had four
	// attempts, and the fifth would come 6 minutes later. 120 s after the
	// last event, every event has had the same four chances, which is
	// what a 305 s wait gives too (5 attempts need 465 s).
	breakerSettle = 120 * time.Second
	// breakerBacklog events are inserted at once for the fail-first and
	// the always-failing runs: more than the pool's slots, so a breaker
	// that lets first attempts go out in a burst shows it.
	breakerBacklog = 300
)

// breakerMode is the breaker on (the shipped settings) or off.
type breakerMode struct {
	name string
	env  []string
}

// verdict reads a figure against the aim with the breaker on; with it
// off the figure is there to compare.
func (m breakerMode) verdict(within bool) string {
	if m.env != nil {
		return "breaker off, for comparison"
	}
	return verdict(within)
}

func (pr *poolRunner) breakerModes() []breakerMode {
	return []breakerMode{{name: "breaker on"}, {name: "breaker off (" + strings.Join(pr.po.BreakerOff, " ") + ")", env: pr.po.BreakerOff}}
}

// webhookBreakerSection runs three receivers with the breaker on and off,
// the largest replica count and RETRY_BACKOFF_SCALE=breakerScale, for
// every trial: one failing a seeded random half of its requests
// (breakerRate events/s for WebhookLoad, counted WebhookSettle after),
// one failing the first attempt of every delivery (breakerBacklog events
// at once, until all arrive or WebhookSettle passes), and one always
// failing (breakerBacklog events at once, watched for
// WebhookLoad/2 with a breakerShortCooldown cool-down): its first burst of
// requests and the requests in each burst after, which with a breaker
// open are its probes.
func (pr *poolRunner) webhookBreakerSection(ctx context.Context) error {
	delivered := map[string][]float64{}
	modes := pr.breakerModes()
	err := pr.trials(ctx, []int{pr.po.largestReplicas()}, func(ctx context.Context, t, rc int) error {
		for _, m := range rotate(modes, t) {
			n, err := pr.breakerFlaky(ctx, rc, m)
			if err != nil {
				return err
			}
			delivered[m.name] = append(delivered[m.name], float64(n))
			if err := pr.breakerFailFirst(ctx, rc, m); err != nil {
				return err
			}
			if err := pr.breakerAllFail(ctx, rc, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	on, off := delivered[modes[0].name], delivered[modes[1].name]
	var each []string
	for t := range on {
		each = append(each, fmt.Sprintf("%.2f", on[t]/max(off[t], 1)))
	}
	ratio := median(on) / max(median(off), 1)
	pr.add(Row{Section: titlePoolWebhookBreaker, Path: fmt.Sprintf("%sflaky 50%%: delivered, breaker on / off", rp(pr.po.largestReplicas())),
		Figure: fmt.Sprintf("%.2f", ratio), Unit: "×", Value: ratio,
		Notes: fmt.Sprintf("medians; per trial %s; %s: the aim is ≥ %.2f×", strings.Join(each, ", "), verdict(ratio >= breakerAimRatio), breakerAimRatio)})
	return nil
}

// breakerFlaky offers the flaky load and returns how many events were
// delivered WebhookSettle after it ended.
func (pr *poolRunner) breakerFlaky(ctx context.Context, rc int, m breakerMode) (int, error) {
	label := fmt.Sprintf("%sflaky 50%%, %d events/s for %s, %s", rp(rc), breakerRate, pr.po.WebhookLoad, m.name)
	hooks, stop, err := pr.breakerStart(ctx, rc, receiverOptions{failShare: 0.5, seed: breakerFlakySeed}, m, "breaker "+label)
	if err != nil {
		return 0, err
	}
	defer stop()
	pr.logf("pool webhook breaker: %s", label)
	ids, err := pr.offer(ctx, breakerRate, pr.po.WebhookLoad)
	if err != nil {
		return 0, fmt.Errorf("pool webhook breaker: %w", err)
	}
	pr.logf("pool webhook breaker: %s: load done, settling %s", label, pr.po.WebhookSettle)
	if err := sleepCtx(ctx, pr.po.WebhookSettle); err != nil {
		return 0, err
	}
	total, distinct := hooks.counts()
	if total != distinct {
		return 0, checkf("pool webhook breaker %s: %d duplicates", label, total-distinct)
	}
	hits := hooks.log()
	pr.add(Row{Section: titlePoolWebhookBreaker, Path: label, Figure: fmt.Sprintf("%d of %d", distinct, len(ids)), Unit: "delivered", Value: float64(distinct),
		Notes: fmt.Sprintf("counted %s after the load ended; %d requests, %d answered 500 (seeded draw); 0 duplicates", pr.po.WebhookSettle, len(hits), len(hits)-total)})
	return distinct, nil
}

// breakerFailFirst inserts breakerBacklog events at once for a receiver
// that fails the first attempt of every delivery and accepts the retry,
// waits until all arrive or WebhookSettle passes, and reports how many
// arrived and when the last did. A backlog, not a trickle: first attempts
// then fail back to back, as after an outage, which is what opens a
// breaker that counts a streak.
func (pr *poolRunner) breakerFailFirst(ctx context.Context, rc int, m breakerMode) error {
	label := fmt.Sprintf("%sfirst attempt fails, %d events at once, %s", rp(rc), breakerBacklog, m.name)
	hooks, stop, err := pr.breakerStart(ctx, rc, receiverOptions{failFirst: true}, m, "breaker "+label)
	if err != nil {
		return err
	}
	defer stop()
	pr.logf("pool webhook breaker: %s", label)
	inserted, err := pr.insertAtOnce(ctx, breakerBacklog)
	if err != nil {
		return err
	}
	w, err := pr.waitHooks(ctx, hooks, breakerBacklog, pr.po.WebhookSettle, "pool webhook breaker: "+label, nil)
	if err != nil {
		return err
	}
	total, distinct := hooks.counts()
	if total != distinct {
		return checkf("pool webhook breaker %s: %d duplicates", label, total-distinct)
	}
	hits := hooks.log()
	firsts := 0
	for _, h := range hits {
		if h.nth == 1 {
			firsts++
		}
	}
	when := fmt.Sprintf("the last %.1f s after the insert", w.doneAt.Sub(inserted).Seconds())
	if w.got < breakerBacklog {
		when = fmt.Sprintf("%d missing %s after the insert", breakerBacklog-w.got, pr.po.WebhookSettle)
	}
	pr.add(Row{Section: titlePoolWebhookBreaker, Path: label, Figure: fmt.Sprintf("%d of %d", w.got, breakerBacklog), Unit: "delivered", Value: float64(w.got),
		Notes: fmt.Sprintf("%s: the aim is every one; %s; %d requests, %d of them first attempts; 0 duplicates", m.verdict(w.got == breakerBacklog), when, len(hits), firsts)})
	return nil
}

// insertAtOnce inserts n events by plain SQL in one statement and returns
// when it committed.
func (pr *poolRunner) insertAtOnce(ctx context.Context, n int) (time.Time, error) {
	rows, err := pr.ctl.Query(ctx, insertEventSQL, 0, n-1)
	if err != nil {
		return time.Time{}, err
	}
	rows.Close()
	return time.Now(), rows.Err()
}

// breakerAllFail inserts breakerBacklog at once for a receiver that
// always fails, watches its requests for WebhookLoad/2 and reports the
// first burst and the bursts after it, split by quiet gaps of a quarter
// of the cool-down.
func (pr *poolRunner) breakerAllFail(ctx context.Context, rc int, m breakerMode) error {
	watch := max(pr.po.WebhookLoad/2, 4*breakerShortCooldown)
	label := fmt.Sprintf("%salways 500, %d events at once, cool-down %s, %s", rp(rc), breakerBacklog, breakerShortCooldown, m.name)
	mode := breakerMode{name: m.name, env: slices.Concat(breakerShortCooldownEnv, m.env)}
	hooks, stop, err := pr.breakerStart(ctx, rc, receiverOptions{failAll: true}, mode, "breaker "+label)
	if err != nil {
		return err
	}
	defer stop()
	pr.logf("pool webhook breaker: %s: watching %s", label, watch)
	inserted, err := pr.insertAtOnce(ctx, breakerBacklog)
	if err != nil {
		return err
	}
	if err := sleepCtx(ctx, watch); err != nil {
		return err
	}
	hits := hooks.log()
	at := make([]time.Time, len(hits))
	for i, h := range hits {
		at[i] = h.at
	}
	bs := bursts(at, breakerShortCooldown/4)
	if len(bs) == 0 {
		return checkf("pool webhook breaker %s: no request reached the receiver in %s", label, watch)
	}
	firstAttempts := 0
	for _, h := range hits[:bs[0].n] {
		if h.nth == 1 {
			firstAttempts++
		}
	}
	after := make([]int, 0, len(bs)-1)
	var timeline []string
	for _, b := range bs[1:] {
		after = append(after, b.n)
		timeline = append(timeline, fmt.Sprintf("%d@%.1fs", b.n, b.start.Sub(inserted).Seconds()))
	}
	most := 0
	if len(after) > 0 {
		most = slices.Max(after)
	}
	pr.add(Row{Section: titlePoolWebhookBreaker, Path: label + ": first burst", Figure: fmt.Sprintf("%d (%d first attempts)", bs[0].n, firstAttempts), Unit: "requests",
		Value: float64(firstAttempts),
		Notes: fmt.Sprintf("requests before the first quiet %s; %s: the aim is at most WEBHOOK_CONCURRENCY=%d first attempts before the breaker opens",
			breakerShortCooldown/4, m.verdict(firstAttempts <= pr.po.WebhookConcurrency), pr.po.WebhookConcurrency)})
	pr.add(Row{Section: titlePoolWebhookBreaker, Path: label + ": requests per burst after", Figure: fmt.Sprintf("%d (most) over %d", most, len(after)), Unit: "requests, bursts",
		Value: float64(most),
		Notes: fmt.Sprintf("once open, each burst is a cool-down's probes; today's aim is at most 1 per cool-down (%s); watched %s, %d requests in all; bursts (size@time since the insert): %s",
			m.verdict(most <= 1), watch, len(hits), strings.Join(timeline, " "))})
	return nil
}

// breakerStart empties the tables, starts one receiver and its endpoint,
// and rc processes with the section's settings and m's.
func (pr *poolRunner) breakerStart(ctx context.Context, rc int, o receiverOptions, m breakerMode, label string) (*receivers, func(), error) {
	if err := pr.truncate(ctx); err != nil {
		return nil, nil, err
	}
	hooks := startReceiversWith(1, o)
	if _, err := pr.hookEndpoints(ctx, hooks); err != nil {
		hooks.close()
		return nil, nil, err
	}
	_, _, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, label, append([]string{"RETRY_BACKOFF_SCALE=" + breakerScale}, m.env...)...)
	if err != nil {
		hooks.close()
		return nil, nil, err
	}
	return hooks, func() { stop(); hooks.close() }, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
