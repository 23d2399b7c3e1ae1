package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/outbox"
)

// The pool-ratelimit section's run: EMAIL_RATE_LIMIT for the whole pool,
// its replicas, how long the rate is watched at the relay, and the aims
// it is read against (docs/OPERATIONS.md, "Email send rate and relay
// throttling").
const (
	rlRate     = 50
	rlReplicas = 3
	rlWindow   = 30 * time.Second
	rlAimLow   = 45.0 // msg/s over the window, at least
	rlAimHigh  = 52.0 // and at most
	rlAimPeak  = 55   // messages in any of the seconds counted from the first DATA, at most
)

// rateLimitSection drains a backlog larger than the window can take with
// rlReplicas `worker run` processes, all with EMAIL_RATE_LIMIT=rlRate, to
// relays that answer at once (so only the limit bounds the pool), for
// every trial. It counts what the relays accepted in the rlWindow after
// their first DATA: msg/s, the messages of each second, the most in one
// (of the seconds counted from the first DATA, which the aim reads, and of
// any second at all, sliding: the relays' arrival jitter can put a few
// more into a second that starts anywhere), and each replica's share;
// duplicates fail it.
func (pr *poolRunner) rateLimitSection(ctx context.Context) error {
	return pr.trials(ctx, []int{rlReplicas}, func(ctx context.Context, t, rc int) error {
		return pr.rateLimitRun(ctx, rc)
	})
}

func (pr *poolRunner) rateLimitRun(ctx context.Context, rc int) error {
	label := fmt.Sprintf("%sEMAIL_RATE_LIMIT=%d, relay delay 0", rp(rc), rlRate)
	// A backlog the window cannot drain, so the limit and nothing else
	// sets the pace from the first second to the last.
	n := int(rlRate*rlWindow.Seconds()*1.5) + 500
	if err := pr.truncate(ctx); err != nil {
		return err
	}
	pr.logf("pool ratelimit: %s: inserting %d", label, n)
	ids, table, err := pr.insertBacklog(ctx, pathPostbox, n)
	if err != nil {
		return fmt.Errorf("pool ratelimit: %w", err)
	}
	if err := pr.settle(ctx, pr.ctl, table); err != nil {
		return err
	}
	rs := &relaySet{gauge: new(smtpsink.Gauge)}
	defer rs.close()
	for range rc {
		s, err := smtpsink.Start(smtpsink.Options{DiscardData: true, Gauge: rs.gauge})
		if err != nil {
			return err
		}
		rs.sinks = append(rs.sinks, s)
	}
	p := path{name: pathPostbox.name, env: []string{"EMAIL_RATE_LIMIT=" + strconv.Itoa(rlRate)}}
	pr.logf("pool ratelimit: %s: starting %d process(es), watching the relays for %s", label, rc, rlWindow)
	busy := machineBusy()
	procs, started, err := pr.start(ctx, p, rs, rc, "ratelimit "+label)
	if err != nil {
		return fmt.Errorf("pool ratelimit: %w", err)
	}
	defer pr.stop(procs)
	var first time.Time
	for first.IsZero() {
		if t := rs.tally(ids); t.received > 0 {
			first = t.firstAt
			break
		}
		if time.Since(started) > time.Minute {
			return checkf("pool ratelimit %s: nothing reached the relays within a minute", label)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(first.Add(rlWindow + time.Second))):
	}
	t := rs.tally(ids)
	cpu := machineBusy() - busy
	if t.dups != 0 {
		return checkf("pool ratelimit %s: %d duplicates", label, t.dups)
	}
	var at []time.Time
	perSink := make([]int, rc)
	for _, ds := range t.byID {
		for _, d := range ds {
			if !d.at.Before(first) && d.at.Before(first.Add(rlWindow)) {
				at = append(at, d.at)
				perSink[d.sink]++
			}
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	seconds := countWindows(at, first, time.Second, int(rlWindow/time.Second))
	// The most in any one second, wherever it starts: two pointers over
	// the sorted arrivals.
	sliding := 0
	for i, j := 0, 0; j < len(at); j++ {
		for at[j].Sub(at[i]) >= time.Second {
			i++
		}
		sliding = max(sliding, j-i+1)
	}
	rate := float64(len(at)) / rlWindow.Seconds()
	peak := slices.Max(seconds)
	counts := make([]string, len(seconds))
	for i, c := range seconds {
		counts[i] = strconv.Itoa(c)
	}
	verdict := "within the aim"
	if rate < rlAimLow || rate > rlAimHigh || peak > rlAimPeak {
		verdict = "OUTSIDE the aim"
	}
	shares, _ := fmtShares(perSink)
	pr.add(Row{Section: titlePoolRateLimit, Path: label, Figure: fmt.Sprintf("%.1f", rate), Unit: "msg/s at the relays", Value: rate,
		Notes: fmt.Sprintf("%d accepted in the %s after the first DATA (+%.2f s from the first exec), %s: aim %.0f–%.0f msg/s and at most %d in any second; burst %g (outbox.RateBurst); per replica %s; machine CPU %.2f ms per message (the processes' boot included); 0 duplicates",
			len(at), rlWindow, first.Sub(started).Seconds(), verdict, rlAimLow, rlAimHigh, rlAimPeak, rlRate*outbox.RateBurst.Seconds(), shares,
			float64(cpu.Microseconds())/1000/float64(max(len(at), 1)))})
	pr.add(Row{Section: titlePoolRateLimit, Path: label + ": most in one second", Figure: fmt.Sprintf("%d / %d", peak, sliding), Unit: "msgs (counted seconds / any second)", Value: float64(sliding),
		Notes: "per second from the first DATA: " + strings.Join(counts, " ")})
	return nil
}
