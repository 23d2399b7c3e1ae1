package bench

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/postbox/postbox/webhook"
)

// The pool-webhook section's aims: R replicas
// against one, each replica's share, and the machine's CPU per delivery
// with a receiver answering at once.
const (
	hookAimRatio     = 2.5
	hookAimShare     = 1.0 / 6
	hookAimCPU       = 1.5 // ms per delivered webhook
	hookCPUConc      = 64  // WEBHOOK_CONCURRENCY of the CPU run
	hookEnqueueShare = 10  // every tenth event goes through webhook.Enqueue, the rest by plain SQL
)

// webhookSection drains a backlog of WebhookEvents events to each of
// WebhookFanouts endpoint counts (receivers answering after
// ReceiverDelay) with each of WebhookReplicas `worker run` processes, for
// every trial; it reports deliveries/s from the first exec and first→last,
// the machine's CPU per delivered webhook, each replica's share (told
// apart at the receiver by User-Agent, see replicaAgent) and the ratio of
// the most replicas to the fewest. Then one replica with
// WEBHOOK_CONCURRENCY=hookCPUConc drains the one-endpoint backlog to a
// receiver that answers at once: the CPU a delivery costs when nothing
// waits. Lost or duplicated deliveries fail it.
func (pr *poolRunner) webhookSection(ctx context.Context) error {
	type key struct {
		replicas, fanout int
		path             string
	}
	rates := map[key][]float64{}
	paths := []path{pathPostbox, pr.hookPeer(pathPeerDefaults), pr.hookPeer(pathPeerTuned)}
	err := pr.trials(ctx, pr.po.WebhookReplicas, func(ctx context.Context, t, rc int) error {
		for _, f := range rotate(pr.po.WebhookFanouts, t) {
			for _, p := range rotate(paths, t) {
				rate, err := pr.webhookRun(ctx, p, rc, f, pr.po.WebhookConcurrency, pr.po.ReceiverDelay, "")
				if err != nil {
					return err
				}
				k := key{rc, f, p.name}
				rates[k] = append(rates[k], rate)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	ratio := func(path string, a, b []float64, aim string) {
		var each []string
		for t := range a {
			each = append(each, fmt.Sprintf("%.2f", a[t]/b[t]))
		}
		r := median(a) / median(b)
		pr.add(Row{Section: titlePoolWebhook, Path: path, Figure: fmt.Sprintf("%.2f", r), Unit: "×", Value: r,
			Notes: fmt.Sprintf("deliveries/s from start, medians; per trial %s%s", strings.Join(each, ", "), aim)})
	}
	lo, hi := slices.Min(pr.po.WebhookReplicas), slices.Max(pr.po.WebhookReplicas)
	for _, f := range pr.po.WebhookFanouts {
		if lo != hi {
			a, b := rates[key{hi, f, pathPostbox.name}], rates[key{lo, f, pathPostbox.name}]
			ratio(fmt.Sprintf("ratio postbox R=%d / R=%d, %d endpoint(s) per event", hi, lo, f), a, b,
				fmt.Sprintf("; %s: the aim is ≥ %.1f× for 3 replicas against 1", verdict(median(a)/median(b) >= hookAimRatio), hookAimRatio))
		}
		for _, rc := range pr.po.WebhookReplicas {
			for _, peer := range paths[1:] {
				ratio(fmt.Sprintf("%sratio postbox / %s, %d endpoint(s) per event", rp(rc), peer.name, f),
					rates[key{rc, f, pathPostbox.name}], rates[key{rc, f, peer.name}], "")
			}
		}
	}
	return pr.trials(ctx, []int{1}, func(ctx context.Context, _, rc int) error {
		_, err := pr.webhookRun(ctx, pathPostbox, rc, 1, hookCPUConc, 0, fmt.Sprintf("CPU: receiver at once, WEBHOOK_CONCURRENCY=%d", hookCPUConc))
		return err
	})
}

// hookPeer is the River peer path p with MaxWorkers = WebhookConcurrency
// per process: as many requests in flight as a worker run.
func (pr *poolRunner) hookPeer(p path) path {
	p.workers = pr.po.WebhookConcurrency
	return p
}

func verdict(within bool) string {
	if within {
		return "within the aim"
	}
	return "OUTSIDE the aim"
}

// webhookRun drains events × fanout deliveries with rc processes and
// returns deliveries/s from the first exec. cpuLabel, when set, names the
// run as the CPU run, whose row's figure is the CPU per delivery.
func (pr *poolRunner) webhookRun(ctx context.Context, p path, rc, fanout, concurrency int, delay time.Duration, cpuLabel string) (float64, error) {
	events := pr.po.WebhookEvents
	want := events * fanout
	label := fmt.Sprintf("%s%s, %d events × %d endpoint(s), receiver %s", rp(rc), p.name, events, fanout, delay)
	if cpuLabel != "" {
		label = rp(rc) + p.name + ", " + cpuLabel
	}
	if err := pr.truncate(ctx); err != nil {
		return 0, err
	}
	hooks := startReceiversWith(fanout, receiverOptions{delay: delay})
	defer hooks.close()
	pr.logf("pool webhook: %s: inserting %d events", label, events)
	if p.peer == nil {
		if _, err := pr.hookEndpoints(ctx, hooks); err != nil {
			return 0, err
		}
		if _, err := pr.insertEvents(ctx, events); err != nil {
			return 0, fmt.Errorf("pool webhook %s: %w", label, err)
		}
		if err := pr.settle(ctx, pr.ctl, "webhook_outbox", "webhook_endpoints"); err != nil {
			return 0, err
		}
	} else {
		if err := pr.insertPeerHooks(ctx, p, hooks, events); err != nil {
			return 0, fmt.Errorf("pool webhook %s: %w", label, err)
		}
		if err := pr.settle(ctx, pr.ctl, "river_job"); err != nil {
			return 0, err
		}
	}
	pr.logf("pool webhook: %s: starting %d process(es)", label, rc)
	procs, started, stop, err := pr.startHooks(ctx, p, rc, concurrency, "webhook "+label)
	if err != nil {
		return 0, err
	}
	defer stop()
	w, err := pr.waitEveryHook(ctx, hooks, want, backlogLimit, "pool webhook: "+label, procs)
	if err != nil {
		return 0, err
	}
	hits := hooks.log()
	fromStart := perSecond(want, w.doneAt.Sub(started))
	span := perSecond(want-1, w.doneAt.Sub(hits[0].at))
	cpuMS := w.cpuPerDelivery()
	shares := perReplica(hits, rc)
	limits := fmt.Sprintf("WEBHOOK_CONCURRENCY=%d per process", concurrency)
	if p.peer != nil {
		limits = p.notes(pr.po) + "; one River job per delivery, InsertMany before the start"
	}
	notes := fmt.Sprintf("%s; %d delivered, 0 duplicates, 0 lost; %.2f s from the first exec, first delivery at +%.2f s; machine CPU %.2f ms per delivered webhook (first→last delivery, every process: replicas, Postgres, receivers, bench); %s",
		limits, want, w.doneAt.Sub(started).Seconds(), hits[0].at.Sub(started).Seconds(), cpuMS, hookLimitNote(rc, concurrency, fanout, delay, fromStart))
	if cpuLabel != "" {
		pr.add(Row{Section: titlePoolWebhook, Path: label, Figure: fmt.Sprintf("%.2f", cpuMS), Unit: "ms CPU per delivery", Value: cpuMS,
			Notes: fmt.Sprintf("%s: the aim is ≤ %.1f ms; %s deliveries/s from start, %s first→last; %s", verdict(cpuMS <= hookAimCPU), hookAimCPU, fmtRate(fromStart), fmtRate(span), notes)})
		return fromStart, nil
	}
	pr.add(Row{Section: titlePoolWebhook, Path: label, Figure: fmtRate(fromStart) + " / " + fmtRate(span), Unit: "deliveries/s from start / first→last", Value: fromStart, Notes: notes})
	if rc > 1 {
		s, _ := fmtShares(shares[:rc])
		least := float64(slices.Min(shares[:rc])) / float64(want)
		pr.add(Row{Section: titlePoolWebhook, Path: label + ": share per replica", Figure: s, Unit: "deliveries (%)", Value: least,
			Notes: fmt.Sprintf("by the User-Agent each replica sends (WEBHOOK_USER_AGENT); the least %.0f%%, %s: the aim is ≥ 1/6 (%.0f%%); %d not attributed",
				100*least, verdict(least >= hookAimShare), 100*hookAimShare, shares[rc])})
	}
	return fromStart, nil
}

// hookLimitNote says what bounds a run: the receivers' delay over every
// slot, or nothing but CPU and Postgres when they answer at once.
func hookLimitNote(rc, concurrency, fanout int, delay time.Duration, rate float64) string {
	if delay <= 0 {
		return "receivers answer at once: CPU and Postgres are the bound"
	}
	limit := float64(rc*concurrency) / delay.Seconds()
	return fmt.Sprintf("%.0f%% of the slots' limit %.0f/s (%d × %d ÷ %s)", 100*rate/limit, limit, rc, concurrency, delay)
}

// insertPeerHooks writes the River peer's backlog: one job per delivery,
// events × the receivers, by InsertMany.
func (pr *poolRunner) insertPeerHooks(ctx context.Context, p path, hooks *receivers, events int) error {
	const chunk = 1000
	client, err := peerInserter(pr.ctl, p.peer.cooldown)
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, 0, chunk)
	flush := func() error {
		_, err := client.InsertMany(ctx, params)
		params = params[:0]
		return err
	}
	for i := range events {
		payload := fmt.Appendf(nil, `{"invoice_id":"in_%d","amount_due":12000,"currency":"eur"}`, i)
		for _, s := range hooks.servers {
			params = append(params, river.InsertManyParams{Args: peerHookArgs{URL: s.URL, EventID: "evt_" + strconv.Itoa(i), Payload: payload}})
			if len(params) == chunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if len(params) > 0 {
		return flush()
	}
	return nil
}

// hookEndpoints creates one endpoint per receiver and returns their ids.
func (pr *poolRunner) hookEndpoints(ctx context.Context, hooks *receivers) ([]string, error) {
	cidrs := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ids := make([]string, 0, len(hooks.servers))
	for _, s := range hooks.servers {
		ep, err := webhook.CreateEndpoint(ctx, pr.ctl, cidrs, webhook.EndpointParams{URL: s.URL})
		if err != nil {
			return nil, fmt.Errorf("create endpoint: %w", err)
		}
		ids = append(ids, ep.ID)
	}
	return ids, nil
}

// insertEventSQL is the plain-SQL webhook enqueue; the row's id is the
// webhook-id receivers see.
const insertEventSQL = `INSERT INTO webhook_outbox (event_type, payload)
SELECT 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i, 'amount_due', 12000, 'currency', 'eur')
FROM generate_series($1::int, $2::int) AS i RETURNING id::text`

// insertEvents writes a backlog of n events before any process starts:
// by plain SQL, and every hookEnqueueShare-th through webhook.Enqueue in
// its own transaction, as applications mix them. It returns their ids.
func (pr *poolRunner) insertEvents(ctx context.Context, n int) ([]string, error) {
	viaGo := n / hookEnqueueShare
	rows, err := pr.ctl.Query(ctx, insertEventSQL, viaGo, n-1)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	enqueue := pr.eventLoad(pr.ctl)
	for i := range viaGo {
		id, err := enqueue(ctx, i*hookEnqueueShare)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// eventLoad commits event i in its own transaction: through
// webhook.Enqueue for every hookEnqueueShare-th, by plain SQL otherwise.
func (pr *poolRunner) eventLoad(db *pgxpool.Pool) load {
	return func(ctx context.Context, i int) (string, error) {
		var id string
		if i%hookEnqueueShare != 0 {
			err := db.QueryRow(ctx, insertEventSQL, i, i).Scan(&id)
			return id, err
		}
		var enq webhook.Enqueuer
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			id, err = enq.Enqueue(ctx, tx, "invoice.paid", fmt.Appendf(nil, `{"invoice_id":"in_%d","amount_due":12000,"currency":"eur"}`, i))
			return err
		})
		return id, err
	}
}

// startHooks starts rc processes of path p for the webhook sections: for
// `worker run`, loopback endpoints admitted,
// WEBHOOK_CONCURRENCY=concurrency, env on top; the SMTP sinks they are
// given carry no mail. stop ends them.
func (pr *poolRunner) startHooks(ctx context.Context, p path, rc, concurrency int, label string, env ...string) ([]*proc, time.Time, func(), error) {
	rs, err := pr.relays(rc)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	p.env = slices.Concat([]string{"WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8", "WEBHOOK_CONCURRENCY=" + strconv.Itoa(concurrency)}, p.env, env)
	procs, started, err := pr.start(ctx, p, rs, rc, label)
	if err != nil {
		rs.close()
		return nil, started, nil, fmt.Errorf("%s: %w", label, err)
	}
	return procs, started, func() { pr.stop(procs); rs.close() }, nil
}

// hookWait is what waitHooks saw: the successful deliveries, when the
// last of them arrived, and the machine's CPU between the first and the
// last.
type hookWait struct {
	got              int
	doneAt           time.Time
	firstGot         int           // deliveries seen when the CPU count started
	busyFrom, busyTo time.Duration // machineBusy then and at the end
}

// cpuPerDelivery is the machine's CPU per delivery after the first seen,
// in ms.
func (w hookWait) cpuPerDelivery() float64 {
	return float64((w.busyTo - w.busyFrom).Microseconds()) / 1000 / float64(max(w.got-w.firstGot, 1))
}

// waitHooks waits until the receivers hold want distinct successful
// deliveries or limit passes, logging progress, and fails when a process
// exits.
func (pr *poolRunner) waitHooks(ctx context.Context, hooks *receivers, want int, limit time.Duration, label string, procs []*proc) (hookWait, error) {
	var w hookWait
	deadline := time.Now().Add(limit)
	nextLog := time.Now().Add(5 * time.Second)
	for {
		_, w.got = hooks.counts()
		if w.got > 0 && w.busyFrom == 0 {
			w.busyFrom, w.firstGot = machineBusy(), w.got
		}
		if w.got >= want {
			w.doneAt, w.busyTo = time.Now(), machineBusy()
			return w, nil
		}
		if time.Now().After(deadline) {
			w.doneAt, w.busyTo = time.Now(), machineBusy()
			return w, nil
		}
		if time.Now().After(nextLog) {
			pr.logf("%s: %d of %d delivered", label, w.got, want)
			nextLog = time.Now().Add(5 * time.Second)
			if err := anyExited(label, procs); err != nil {
				return w, err
			}
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return w, err
		}
	}
}

// waitEveryHook is waitHooks for a run that must deliver every one of want
// deliveries exactly once: fewer within limit fails it, and so does a
// duplicate, including one that arrives just after the last delivery.
func (pr *poolRunner) waitEveryHook(ctx context.Context, hooks *receivers, want int, limit time.Duration, label string, procs []*proc) (hookWait, error) {
	w, err := pr.waitHooks(ctx, hooks, want, limit, label, procs)
	if err != nil {
		return w, err
	}
	if w.got < want {
		return w, checkf("%s: %d of %d deliveries arrived within %s", label, w.got, want, limit)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate sent just after the last first arrival still counts
	if total, distinct := hooks.counts(); total != distinct {
		return w, checkf("%s: %d duplicates among %d deliveries", label, total-distinct, want)
	}
	return w, nil
}
