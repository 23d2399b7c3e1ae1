package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/postbox/postbox/webhook"
)

// The pool-webhook-fair section: one tenant's slow endpoint against the
// other tenants' webhooks, with one `worker run` process at
// WEBHOOK_CONCURRENCY=hookFairConc. Tenant A (t0) has one endpoint, B…K
// (t1…t10) one each, all on one receiver told apart by path. Three cases:
//
//  1. A's endpoint answers every request after hookFairSlow, B…K's after
//     hookFairQuick. A enqueues WebhookFairEvents events at once by plain
//     SQL; hookFairGap after its last commit each of B…K enqueues
//     hookFairRate events a second for WebhookFairLoad (plain SQL and
//     webhook.EnqueueEvent). B…K's deliveries, commit → request at the
//     receiver; the requests A's receiver holds, read every
//     hookFairSample over B…K's load, against A's max-min fair share:
//     the slots B…K left it.
//  2. A alone: a flood with nobody beside it, and how many slots it takes.
//  3. A fan-out backlog: A enqueues WebhookFairBacklog events to an
//     endpoint answering after hookFairQuick, then B one event at a time,
//     a second apart: B's commit → request.
//
// Each on postbox, on the previous build (WebhookFairBaseline, given its
// binary) and on the River peer, one job per delivery with MaxWorkers
// hookFairConc, every job at one priority: the events are alike, and
// River knows no tenants. With WebhookFairHold, cases 1 and 3 run again
// with a snapshot held, as pool-fair's FairHold: a REPEATABLE READ
// transaction that has read (holdSnapshot), opened before A's flood and
// held to the case's end, so no row version that dies meanwhile can be
// removed, nor its index entries marked dead; postbox's path only, every
// path with WebhookFairHoldAll. Nothing is asserted but the counts: a
// duplicate fails the run, a delivery still missing at the bound makes
// its figures lower bounds.
const (
	hookFairConc      = 32                     // WEBHOOK_CONCURRENCY of the one process, and the River peer's MaxWorkers
	hookFairSlow      = 2 * time.Second        // A's receiver, per request (cases 1 and 2)
	hookFairQuick     = 20 * time.Millisecond  // B…K's receivers, per request; A's too in case 3
	hookFairOthers    = 10                     // tenants B…K
	hookFairRate      = 5                      // events a second each of B…K enqueues
	hookFairChunk     = 5000                   // A's events per transaction
	hookFairGap       = 2 * time.Second        // from A's last commit to the first event of another tenant
	hookFairSample    = 50 * time.Millisecond  // how often the receiver's requests in flight are read
	hookFairAlone     = 2000                   // case 2's events, at most
	hookFairSingles   = 5                      // case 3: B's single events, a second apart
	hookFairAimP99    = 500 * time.Millisecond // B…K's p99, case 1
	hookFairAimShare  = 0.9                    // A's requests in flight against its fair share (case 1), against every slot (case 2)
	hookFairAimSingle = time.Second            // B's slowest single event, case 3
	hookFairLoadConns = 4                      // the load's goroutines: pr.ctl's connections
)

// hookFairRuns are a case's runs: postbox, the previous build when its
// binary is given, River tuned at the same concurrency; then, for a case
// that holds (1 and 3) and with WebhookFairHold, the held-snapshot
// variants, postbox's only unless WebhookFairHoldAll.
func (pr *poolRunner) hookFairRuns(holds bool) []fairRun {
	runs := []fairRun{{p: pathPostbox}}
	if pr.po.WebhookFairBaseline != "" {
		runs = append(runs, fairRun{p: path{name: "postbox baseline binary", bin: pr.po.WebhookFairBaseline}, baseline: true})
	}
	runs = append(runs, fairRun{p: path{name: pathPeerTuned.name, peer: peerTuned, workers: hookFairConc}})
	return withHeld(runs, holds && pr.po.WebhookFairHold, pr.po.WebhookFairHoldAll)
}

// hookFairNotes says how path p was set up.
func (pr *poolRunner) hookFairNotes(p path) string {
	switch {
	case p.bin != "":
		return fmt.Sprintf("WEBHOOK_CONCURRENCY=%d; the previous build's worker (%s), on this build's schema", hookFairConc, p.bin)
	case p.peer != nil:
		return p.notes(pr.po) + "; one River job per delivery (the endpoint's URL in the job, POSTed signed with a 10 s deadline), every job at River's default priority: the events are alike and River knows no tenants"
	}
	return fmt.Sprintf("WEBHOOK_CONCURRENCY=%d", hookFairConc)
}

// webhookFairSection runs the three cases on every path, for every trial,
// cases 1 and 3 also with a snapshot held (WebhookFairHold).
func (pr *poolRunner) webhookFairSection(ctx context.Context) error {
	cases := []struct {
		run   func(context.Context, fairRun) error
		holds bool
	}{{pr.hookFairSlowRun, true}, {pr.hookFairAloneRun, false}, {pr.hookFairBacklogRun, true}}
	return pr.trials(ctx, []int{1}, func(ctx context.Context, t, _ int) error {
		for _, c := range cases {
			for _, r := range rotate(pr.hookFairRuns(c.holds), t) {
				if err := c.run(ctx, r); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// inflight counts the requests a receiver holds, and the most at once.
type inflight struct{ now, peak atomic.Int64 }

func (g *inflight) enter() {
	n := g.now.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

func (g *inflight) leave() { g.now.Add(-1) }

// hookFairReceiver is the section's one receiver: endpoint i at path
// /e/i (A's /e/0, B…K's /e/1…/e/10), a server in front of a receivers
// set that logs each request as it arrives. It then holds the answer
// for the endpoint's time, and counts the requests it holds for A and
// for B…K.
type hookFairReceiver struct {
	hooks     *receivers
	srv       *httptest.Server
	a, others inflight
}

// startHookFairReceiver starts the receiver, A's endpoint answering after
// slow, the others' after hookFairQuick.
func startHookFairReceiver(slow time.Duration) *hookFairReceiver {
	r := &hookFairReceiver{hooks: startReceiversWith(1, receiverOptions{byPath: true})}
	logged := r.hooks.servers[0].Config.Handler
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		g, hold := &r.others, hookFairQuick
		if req.URL.Path == "/e/0" {
			g, hold = &r.a, slow
		}
		g.enter()
		defer g.leave()
		logged.ServeHTTP(w, req) // the status is set, and sent when this handler returns
		time.Sleep(hold)
	}))
	return r
}

func (r *hookFairReceiver) url(endpoint int) string {
	return r.srv.URL + "/e/" + strconv.Itoa(endpoint)
}

func (r *hookFairReceiver) close() {
	r.srv.Close()
	r.hooks.close()
}

// missing counts the deliveries of keys that have not succeeded yet.
func (rc *receivers) missing(keys []hookKey) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, k := range keys {
		if rc.got[k] == 0 {
			n++
		}
	}
	return n
}

// sampleInflight reads gs every hookFairSample until ctx ends and
// returns each one's readings.
func sampleInflight(ctx context.Context, gs ...*inflight) [][]int {
	out := make([][]int, len(gs))
	tick := time.NewTicker(hookFairSample)
	defer tick.Stop()
	for {
		for i, g := range gs {
			out[i] = append(out[i], int(g.now.Load()))
		}
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// sampling reads gs from now until the returned stop is called, which
// returns the readings.
func sampling(ctx context.Context, gs ...*inflight) (stop func() [][]int) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan [][]int, 1)
	go func() { done <- sampleInflight(sctx, gs...) }()
	return func() [][]int {
		cancel()
		return <-done
	}
}

// meanP50 is the mean and the median (nearest rank) of samples.
func meanP50(samples []int) (float64, int) {
	if len(samples) == 0 {
		return 0, 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	sum := 0
	for _, v := range s {
		sum += v
	}
	return float64(sum) / float64(len(s)), s[(len(s)+1)/2-1]
}

// fairShare is A's max-min fair share of slots slots when the other
// tenants held others of them on average, and A's mean held against it.
func fairShare(slots int, others, a float64) (share, ratio float64) {
	share = float64(slots) - others
	if share <= 0 {
		return share, 0
	}
	return share, a / share
}

// hookFairSetup empties the tables, starts the receiver (A's endpoint
// answering after slow), makes the 1+hookFairOthers tenants' proven
// endpoints for postbox's paths (the peer's jobs carry their URL),
// starts r's one process and, when r holds a snapshot, opens it (before
// the caller enqueues A's flood). done releases it and stops it all.
func (pr *poolRunner) hookFairSetup(ctx context.Context, r fairRun, slow time.Duration, label string) (rcv *hookFairReceiver, procs []*proc, done func(), err error) {
	p := r.p
	if err := pr.truncate(ctx); err != nil {
		return nil, nil, nil, err
	}
	rcv = startHookFairReceiver(slow)
	if p.peer == nil {
		if _, err := pr.ctl.Exec(ctx, tenantEndpointsSQL, 1+hookFairOthers, rcv.srv.URL, 1); err != nil {
			rcv.close()
			return nil, nil, nil, fmt.Errorf("%s: endpoints: %w", label, err)
		}
	}
	if err := pr.settle(ctx, pr.ctl, "webhook_endpoints"); err != nil {
		rcv.close()
		return nil, nil, nil, err
	}
	procs, _, stop, err := pr.startHooks(ctx, p, 1, hookFairConc, "webhook fair "+label)
	if err != nil {
		rcv.close()
		return nil, nil, nil, err
	}
	release, err := r.snapshot(ctx, pr.url)
	if err != nil {
		stop()
		rcv.close()
		return nil, nil, nil, fmt.Errorf("%s: %w", label, err)
	}
	return rcv, procs, func() { release(); stop(); rcv.close() }, nil
}

// hookFairEventSQL enqueues tenant $1's events $2…$3 by plain SQL.
const hookFairEventSQL = `INSERT INTO webhook_outbox (tenant_id, event_type, payload)
SELECT $1::text, 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i, 'amount_due', 12000, 'currency', 'eur')
FROM generate_series($2::int, $3::int) AS i RETURNING id::text`

func hookFairPayload(i int) []byte {
	return fmt.Appendf(nil, `{"invoice_id":"in_%d","amount_due":12000,"currency":"eur"}`, i)
}

// hookFairFlood is A's n events to its endpoint in transactions of
// hookFairChunk: webhook_outbox rows by plain SQL for postbox's paths,
// River jobs by InsertMany for the peer. It returns when the last
// committed.
func (pr *poolRunner) hookFairFlood(ctx context.Context, p path, rcv *hookFairReceiver, n int) (time.Time, error) {
	var client *river.Client[pgx.Tx]
	if p.peer != nil {
		var err error
		if client, err = peerInserter(pr.ctl, p.peer.cooldown); err != nil {
			return time.Time{}, err
		}
	}
	for lo := 0; lo < n; lo += hookFairChunk {
		hi := min(lo+hookFairChunk, n)
		if client == nil {
			if _, err := pr.ctl.Exec(ctx, hookFairEventSQL, isoTenant(0), lo, hi-1); err != nil {
				return time.Time{}, fmt.Errorf("tenant A's events: %w", err)
			}
			continue
		}
		params := make([]river.InsertManyParams, 0, hi-lo)
		for i := lo; i < hi; i++ {
			params = append(params, river.InsertManyParams{Args: peerHookArgs{URL: rcv.url(0), EventID: "evt_a_" + strconv.Itoa(i), Payload: hookFairPayload(i)}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return time.Time{}, fmt.Errorf("tenant A's jobs: %w", err)
		}
	}
	return time.Now(), nil
}

// hookFairLoad commits event i for tenant tenantOf(i) in a transaction of
// its own on p: by plain SQL, every hookEnqueueShare-th round of the
// tenants by webhook.EnqueueEvent, for postbox's paths; one River job by
// InsertTx for the peer. It returns the delivery the receiver will see,
// as hookFairKey reads it back.
func (pr *poolRunner) hookFairLoad(p path, rcv *hookFairReceiver, tenantOf func(i int) int) (load, error) {
	if p.peer != nil {
		client, err := peerInserter(pr.ctl, p.peer.cooldown)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, i int) (string, error) {
			n := tenantOf(i)
			args := peerHookArgs{URL: rcv.url(n), EventID: "evt_" + isoTenant(n) + "_" + strconv.Itoa(i), Payload: hookFairPayload(i)}
			err := pgx.BeginFunc(ctx, pr.ctl, func(tx pgx.Tx) error {
				_, err := client.InsertTx(ctx, tx, args, nil)
				return err
			})
			return hookFairDelivery(n, args.EventID), err
		}, nil
	}
	return func(ctx context.Context, i int) (string, error) {
		n := tenantOf(i)
		var (
			id  string
			err error
		)
		if (i/hookFairOthers)%hookEnqueueShare == 0 {
			id, err = pr.enqueueEvent(ctx, webhook.Event{Tenant: isoTenant(n), Type: "invoice.paid", Payload: hookFairPayload(i)})
		} else {
			err = pr.ctl.QueryRow(ctx, hookFairEventSQL, isoTenant(n), i, i).Scan(&id)
		}
		return hookFairDelivery(n, id), err
	}, nil
}

// hookFairDelivery names event id's delivery to endpoint n as a load
// returns it; hookFairKey reads it back.
func hookFairDelivery(n int, id string) string { return strconv.Itoa(n) + "/" + id }

func hookFairKey(delivery string) hookKey {
	var k hookKey
	_, _ = fmt.Sscanf(delivery, "%d/%s", &k.endpoint, &k.id) // ids hold no space
	return k
}

// hookFairCommits is openLoop's commits by the receiver's key.
func hookFairCommits(byDelivery map[string]time.Time) map[hookKey]time.Time {
	out := make(map[hookKey]time.Time, len(byDelivery))
	for d, at := range byDelivery {
		out[hookFairKey(d)] = at
	}
	return out
}

// hookFairAwait waits until every key of commits was delivered or limit
// passes, and fails when the process exits. It returns when it stopped.
func (pr *poolRunner) hookFairAwait(ctx context.Context, rcv *hookFairReceiver, commits map[hookKey]time.Time, limit time.Duration, label string, procs []*proc) (time.Time, error) {
	keys := make([]hookKey, 0, len(commits))
	for k := range commits {
		keys = append(keys, k)
	}
	deadline, nextLog := time.Now().Add(limit), time.Now().Add(5*time.Second)
	for {
		left := rcv.hooks.missing(keys)
		if now := time.Now(); left == 0 || now.After(deadline) {
			return now, nil
		} else if now.After(nextLog) {
			pr.logf("%s: %d of %d delivered", label, len(keys)-left, len(keys))
			nextLog = now.Add(5 * time.Second)
		}
		if err := anyExited(label, procs); err != nil {
			return time.Time{}, err
		}
		if err := sleepCtx(ctx, 25*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// hookFairCollected is what a run's receiver got once its deliveries were
// awaited.
type hookFairCollected struct {
	waited  time.Time             // when the wait for commits ended
	read    time.Time             // when hits were read
	firsts  map[hookKey]time.Time // each delivery's first success
	hits    []hit                 // every request, in order of arrival
	lat     []time.Duration       // commit → first request of commits' deliveries
	missing int                   // of commits' deliveries, not made by waited (timed to it)
}

// hookFairCollect awaits commits' deliveries (hookFairAwait), reads the
// receiver (hookFairTally) and times them (hookFairLatencies).
func (pr *poolRunner) hookFairCollect(ctx context.Context, rcv *hookFairReceiver, commits map[hookKey]time.Time, label string, procs []*proc) (hookFairCollected, error) {
	var c hookFairCollected
	var err error
	if c.waited, err = pr.hookFairAwait(ctx, rcv, commits, pr.po.WebhookFairWait, "pool webhook fair: "+label, procs); err != nil {
		return c, err
	}
	if c.firsts, c.hits, err = hookFairTally(rcv, "pool webhook fair "+label); err != nil {
		return c, err
	}
	c.read = time.Now()
	c.lat, c.missing = hookFairLatencies(commits, c.firsts, c.waited)
	return c, nil
}

// hookFairTally is what the receiver got: each delivery's first success,
// after a last look for duplicates, which fail the run.
func hookFairTally(rcv *hookFairReceiver, label string) (map[hookKey]time.Time, []hit, error) {
	time.Sleep(500 * time.Millisecond) // a duplicate sent just after the last first arrival still counts
	if total, distinct := rcv.hooks.counts(); total != distinct {
		return nil, nil, checkf("%s: %d duplicates among %d deliveries", label, total-distinct, distinct)
	}
	hits := rcv.hooks.log()
	firsts := make(map[hookKey]time.Time, len(hits))
	for _, h := range hits {
		if _, ok := firsts[h.key]; !ok && h.status < 300 {
			firsts[h.key] = h.at
		}
	}
	return firsts, hits, nil
}

// commitsAfter is the commits of commits made after t.
func commitsAfter(commits map[hookKey]time.Time, t time.Time) map[hookKey]time.Time {
	after := make(map[hookKey]time.Time, len(commits))
	for k, c := range commits {
		if c.After(t) {
			after[k] = c
		}
	}
	return after
}

// hookFairLatencies is commit → first request of each key of commits; a
// delivery not made counts the time to waited, and missing counts them.
func hookFairLatencies(commits, firsts map[hookKey]time.Time, waited time.Time) (lat []time.Duration, missing int) {
	for k, c := range commits {
		at, ok := firsts[k]
		if !ok {
			at = waited
			missing++
		}
		lat = append(lat, at.Sub(c))
	}
	return lat, missing
}

// latencyFigure is "p50 / p99 / max" of lat in ms, "≥ " before it when
// some are lower bounds, and what arrived.
func (pr *poolRunner) latencyFigure(lat []time.Duration, missing int) (figure string, p99, most time.Duration, arrived string) {
	ps := percentiles(lat, 50, 99, 100)
	figure = fmtMs(ps[0]) + " / " + fmtMs(ps[1]) + " / " + fmtMs(ps[2])
	arrived = fmt.Sprintf("all %d arrived", len(lat))
	if missing > 0 {
		figure = "≥ " + figure
		arrived = fmt.Sprintf("%d of %d had NOT arrived %s after the load: the figures are lower bounds", missing, len(lat), pr.po.WebhookFairWait)
	}
	return figure, ps[1], ps[2], arrived
}

// arrivals counts the hits of endpoints in [from, to), A's (endpoint 0)
// and the others'.
func arrivals(hits []hit, from, to time.Time) (a, others int) {
	for _, h := range hits {
		if h.status >= 300 || h.at.Before(from) || !h.at.Before(to) {
			continue
		}
		if h.key.endpoint == 0 {
			a++
		} else {
			others++
		}
	}
	return a, others
}

// hookFairSlowRun is case 1 on r.
func (pr *poolRunner) hookFairSlowRun(ctx context.Context, r fairRun) error {
	p := r.p
	label := fmt.Sprintf("A's endpoint %s, B…K's %s: %s", hookFairSlow, hookFairQuick, r.name())
	rcv, procs, done, err := pr.hookFairSetup(ctx, r, hookFairSlow, label)
	if err != nil {
		return err
	}
	defer done()
	load, err := pr.hookFairLoad(p, rcv, func(i int) int { return 1 + i%hookFairOthers })
	if err != nil {
		return err
	}
	events := pr.po.WebhookFairEvents
	pr.logf("pool webhook fair: %s: A enqueues %d events", label, events)
	flooded, err := pr.hookFairFlood(ctx, p, rcv, events)
	if err != nil {
		return fmt.Errorf("pool webhook fair %s: %w", label, err)
	}
	if err := sleepCtx(ctx, time.Until(flooded.Add(hookFairGap))); err != nil {
		return err
	}
	rate := hookFairOthers * hookFairRate
	total := max(int(float64(rate)*pr.po.WebhookFairLoad.Seconds()), 1)
	_, atGap := rcv.hooks.counts()
	pr.logf("pool webhook fair: %s: B…K enqueue %d events/s for %s (A's %d committed %.1f s ago, %d delivered)", label, rate, pr.po.WebhookFairLoad, events, time.Since(flooded).Seconds(), atGap)
	stopSampling := sampling(ctx, &rcv.a, &rcv.others)
	loadStart, busy := time.Now(), machineBusy()
	byDelivery, _, err := openLoop(ctx, rate, total, hookFairLoadConns, load)
	if err != nil {
		stopSampling()
		return fmt.Errorf("pool webhook fair %s: B…K's load: %w", label, err)
	}
	commits := hookFairCommits(byDelivery)
	loadEnd := loadStart.Add(pr.po.WebhookFairLoad)
	if err := sleepCtx(ctx, time.Until(loadEnd)); err != nil {
		stopSampling()
		return err
	}
	cpu, samples := machineBusy()-busy, stopSampling()
	c, err := pr.hookFairCollect(ctx, rcv, commits, label+", B…K's events", procs)
	if err != nil {
		return err
	}
	dead := pr.hookFairDead(ctx, p)
	figure, p99, _, arrived := pr.latencyFigure(c.lat, c.missing)
	// B…K's first events find A alone until then, holding every slot
	// (an endpoint alone may): they wait for A's first requests to end.
	// The same figures from then on say what the shares do.
	steady, steadyMissing := hookFairLatencies(commitsAfter(commits, loadStart.Add(hookFairSlow)), c.firsts, c.waited)
	steadyFigure, _, _, _ := pr.latencyFigure(steady, steadyMissing)
	aIn, othersIn := arrivals(c.hits, loadStart, loadEnd)
	notes := pr.hookFairNotes(p)
	pr.add(Row{Section: titlePoolWebhookFair, Path: label + ": B…K's deliveries", Figure: figure, Unit: "ms p50/p99/max commit→request", Value: float64(p99) / float64(time.Millisecond),
		Notes: fmt.Sprintf("aim p99 ≤ %s: %s; %s; committed from %s into the load on, once A's first requests (started while A was alone) had ended: %s ms (%d events); %d tenants × %d events/s for %s, each committed on its own (every %dth round by webhook.EnqueueEvent, the rest by plain SQL), %s after A's %s events committed; %s",
			hookFairAimP99, verdict(p99 <= hookFairAimP99), arrived, hookFairSlow, steadyFigure, len(steady), hookFairOthers, hookFairRate, pr.po.WebhookFairLoad, hookEnqueueShare, hookFairGap, fmtCount(events), notes)})

	aMean, aP50 := meanP50(samples[0])
	oMean, _ := meanP50(samples[1])
	share, ratio := fairShare(hookFairConc, oMean, aMean)
	pr.add(Row{Section: titlePoolWebhookFair, Path: label + ": A's requests in flight during B…K's load", Figure: fmt.Sprintf("%.1f / %d", aMean, aP50), Unit: "mean / p50 at A's receiver", Value: aMean,
		Notes: fmt.Sprintf("%d readings, one every %s; B…K held %.2f on average; A's receiver got %.1f/s (%d in the window; every slot's limit %.1f/s, reached in waves, so a window not a whole number of %s may count a wave more), B…K's %d; machine CPU %s per delivery over the window (every process on the machine); 0 duplicates; %s",
			len(samples[0]), hookFairSample, oMean, perSecond(aIn, pr.po.WebhookFairLoad), aIn, float64(hookFairConc)/hookFairSlow.Seconds(), hookFairSlow, othersIn, fmtCPU(cpu, aIn+othersIn), dead)})
	pr.add(Row{Section: titlePoolWebhookFair, Path: label + ": A's share of its fair share", Figure: fmt.Sprintf("%.2f", ratio), Unit: "× (A's mean / (32 − B…K's mean))", Value: ratio,
		Notes: fmt.Sprintf("aim ≥ %.1f×: %s; A's max-min fair share %.1f of %d slots (%d − the %.2f B…K held), A held %.1f on average", hookFairAimShare, verdict(ratio >= hookFairAimShare), share, hookFairConc, hookFairConc, oMean, aMean)})
	return nil
}

// hookFairDead is the dead tuples p's queue tables hold at the end of a
// run, before its snapshot, if it holds one, is released.
func (pr *poolRunner) hookFairDead(ctx context.Context, p path) string {
	return deadTuples(ctx, pr.ctl, p, "webhook_outbox", "webhook_deliveries")
}

// hookFairAloneRun is case 2 on r: A's flood alone, its slots read over
// a window from hookFairGap after its last commit.
func (pr *poolRunner) hookFairAloneRun(ctx context.Context, r fairRun) error {
	p := r.p
	label := fmt.Sprintf("A alone, endpoint %s: %s", hookFairSlow, r.name())
	rcv, procs, done, err := pr.hookFairSetup(ctx, r, hookFairSlow, label)
	if err != nil {
		return err
	}
	defer done()
	events, window := min(hookFairAlone, pr.po.WebhookFairEvents), pr.po.hookFairAloneWindow()
	pr.logf("pool webhook fair: %s: A enqueues %d events, read for %s", label, events, window)
	flooded, err := pr.hookFairFlood(ctx, p, rcv, events)
	if err != nil {
		return fmt.Errorf("pool webhook fair %s: %w", label, err)
	}
	if err := sleepCtx(ctx, time.Until(flooded.Add(hookFairGap))); err != nil {
		return err
	}
	stopSampling := sampling(ctx, &rcv.a)
	from, busy := time.Now(), machineBusy()
	if err := sleepCtx(ctx, window); err != nil {
		stopSampling()
		return err
	}
	cpu, samples := machineBusy()-busy, stopSampling()
	if err := anyExited("pool webhook fair: "+label, procs); err != nil {
		return err
	}
	_, hits, err := hookFairTally(rcv, "pool webhook fair "+label)
	if err != nil {
		return err
	}
	aIn, _ := arrivals(hits, from, from.Add(window))
	mean, p50 := meanP50(samples[0])
	peak := int(rcv.a.peak.Load())
	pr.add(Row{Section: titlePoolWebhookFair, Path: label + ": A's requests in flight", Figure: fmt.Sprintf("%d / %.1f / %d", peak, mean, p50), Unit: "peak / mean / p50 at A's receiver", Value: mean,
		Notes: fmt.Sprintf("aim: every one of the %d slots (mean ≥ %.1f×): %s; peak over the run, mean and p50 of %d readings over %s from %s after A's %s events committed; A's receiver got %.1f/s (%d; every slot's limit %.1f/s); machine CPU %s per delivery over the window (every process on the machine); 0 duplicates; %s",
			hookFairConc, hookFairAimShare, verdict(mean >= hookFairAimShare*hookFairConc), len(samples[0]), window, hookFairGap, fmtCount(events), perSecond(aIn, window), aIn,
			float64(hookFairConc)/hookFairSlow.Seconds(), fmtCPU(cpu, aIn), pr.hookFairNotes(p))})
	return nil
}

// hookFairAloneWindow is how long case 2 reads A's slots: a third of the
// load, at least three of A's answers, rounded up to a whole number of
// them (A's requests arrive in waves, one a slot every hookFairSlow).
func (o PoolOptions) hookFairAloneWindow() time.Duration {
	d := max(o.WebhookFairLoad/3, 3*hookFairSlow)
	return (d + hookFairSlow - 1) / hookFairSlow * hookFairSlow
}

// hookFairBacklogRun is case 3 on r: A's backlog, then B's single events
// a second apart, from A's last commit.
func (pr *poolRunner) hookFairBacklogRun(ctx context.Context, r fairRun) error {
	p := r.p
	backlog := pr.po.WebhookFairBacklog
	label := fmt.Sprintf("fan-out backlog, A's %s events, endpoints %s: %s", fmtCount(backlog), hookFairQuick, r.name())
	rcv, procs, done, err := pr.hookFairSetup(ctx, r, hookFairQuick, label)
	if err != nil {
		return err
	}
	defer done()
	load, err := pr.hookFairLoad(p, rcv, func(int) int { return 1 })
	if err != nil {
		return err
	}
	pr.logf("pool webhook fair: %s: A enqueues %d events", label, backlog)
	start := time.Now()
	flooded, err := pr.hookFairFlood(ctx, p, rcv, backlog)
	if err != nil {
		return fmt.Errorf("pool webhook fair %s: %w", label, err)
	}
	_, atFlood := rcv.hooks.counts()
	pr.logf("pool webhook fair: %s: A's committed in %.1f s, %d delivered; B enqueues %d single events a second apart", label, flooded.Sub(start).Seconds(), atFlood, hookFairSingles)
	busy := machineBusy()
	commits := map[hookKey]time.Time{}
	for k := range hookFairSingles {
		if err := sleepCtx(ctx, time.Until(flooded.Add(time.Duration(k)*time.Second))); err != nil {
			return err
		}
		d, err := load(ctx, k)
		if err != nil {
			return fmt.Errorf("pool webhook fair %s: B's event %d: %w", label, k, err)
		}
		commits[hookFairKey(d)] = time.Now()
	}
	c, err := pr.hookFairCollect(ctx, rcv, commits, label+", B's events", procs)
	if err != nil {
		return err
	}
	cpu := machineBusy() - busy
	dead := pr.hookFairDead(ctx, p)
	figure, _, most, arrived := pr.latencyFigure(c.lat, c.missing)
	aIn, bIn := arrivals(c.hits, flooded, c.read)
	aBy, _ := arrivals(c.hits, flooded, c.waited)
	each := make([]string, 0, len(c.lat))
	for _, k := range slices.SortedFunc(maps.Keys(commits), func(a, b hookKey) int { return commits[a].Compare(commits[b]) }) {
		if at, ok := c.firsts[k]; ok {
			each = append(each, fmtMs(at.Sub(commits[k])))
		} else {
			each = append(each, "≥ "+fmtMs(c.waited.Sub(commits[k])))
		}
	}
	pr.add(Row{Section: titlePoolWebhookFair, Path: label + ": B's single events", Figure: figure, Unit: "ms p50/p99/max commit→request", Value: float64(most) / float64(time.Millisecond),
		Notes: fmt.Sprintf("aim every one ≤ %s: %s; %s; in order %v ms; A's %s events committed in %.1f s (%d transactions), %d of them delivered by then, %d more by B's last (%.0f/s); machine CPU %s per delivery from A's last commit; 0 duplicates; %s; %s",
			hookFairAimSingle, verdict(most <= hookFairAimSingle), arrived, each, fmtCount(backlog), flooded.Sub(start).Seconds(), (backlog+hookFairChunk-1)/hookFairChunk,
			atFlood, aBy, perSecond(aBy, c.waited.Sub(flooded)), fmtCPU(cpu, aIn+bIn), dead, pr.hookFairNotes(p))})
	return nil
}
