package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The pool-webhook-scale section is pool-scale for webhooks: the database
// an application has after months of webhooks (WebhookScaleEvents
// delivered events, each with its delivery and attempt, all to the
// endpoint the load goes to, and the last week's dispatched outbox rows
// the prune keeps) and a REPEATABLE READ snapshot held open for a whole
// run. Beside it, on the empty database, the River peer with River's
// defaults and one job per delivery, held and not.

// hookScaleCase is one steady-load run of the webhook scale section.
type hookScaleCase struct {
	p      path
	seeded bool // on the database holding WebhookScaleEvents delivered events
	hold   bool // a REPEATABLE READ snapshot open for the whole run
}

func (c hookScaleCase) label(po PoolOptions, rc int) string {
	db := "empty database"
	if c.seeded {
		db = fmt.Sprintf("%s delivered events", fmtCount(po.WebhookScaleEvents))
	}
	held := "nothing held"
	if c.hold {
		held = "snapshot held"
	}
	return fmt.Sprintf("%s%s, %s: %s", rp(rc), db, held, c.p.name)
}

// webhookSeed is the section's history, seeded once per event count and
// migration.
func (pr *poolRunner) webhookSeed() seedKind {
	return seedKind{prefix: "postbox_hookscale_seed", rows: pr.po.WebhookScaleEvents, what: "delivered events (event, delivery, attempt; the last week's outbox rows)",
		fill: func(ctx context.Context, url string) (time.Duration, error) {
			return seedHookHistory(ctx, url, pr.po.WebhookScaleEvents, pr.logf)
		}}
}

// webhookScaleSection runs the steady load with the largest replica count
// on the empty database (postbox and the River peer, each without and
// with a held snapshot) and drains a backlog there, then does the same
// for postbox on a copy of the seeded database. It reports, beside each
// run's figures, the seeded database against the empty one.
func (pr *poolRunner) webhookScaleSection(ctx context.Context) error {
	var empty, seeded []hookScaleCase
	for _, hold := range []bool{false, true} {
		empty = append(empty, hookScaleCase{p: pathPostbox, hold: hold}, hookScaleCase{p: pr.hookPeer(pathPeerDefaults), hold: hold})
		seeded = append(seeded, hookScaleCase{p: pathPostbox, seeded: true, hold: hold})
	}
	type key struct{ seeded, hold bool }
	drains := map[bool][]float64{}
	p99 := map[key][]float64{} // postbox
	err := pr.trials(ctx, []int{pr.po.largestReplicas()}, func(ctx context.Context, t, rc int) error {
		for _, c := range rotate(empty, t) {
			v, err := pr.hookScaleRun(ctx, c, rc)
			if err != nil {
				return err
			}
			if c.p.peer == nil {
				p99[key{false, c.hold}] = append(p99[key{false, c.hold}], v)
			}
		}
		rate, err := pr.hookScaleDrain(ctx, rc, false)
		if err != nil {
			return err
		}
		drains[false] = append(drains[false], rate)
		return pr.onSeeded(ctx, pr.webhookSeed(), func(ctx context.Context) error {
			for _, c := range rotate(seeded, t) {
				v, err := pr.hookScaleRun(ctx, c, rc)
				if err != nil {
					return err
				}
				p99[key{true, c.hold}] = append(p99[key{true, c.hold}], v)
			}
			rate, err := pr.hookScaleDrain(ctx, rc, true)
			drains[true] = append(drains[true], rate)
			return err
		})
	})
	if err != nil {
		return err
	}
	events := fmtCount(pr.po.WebhookScaleEvents)
	if e, s := median(drains[false]), median(drains[true]); e > 0 {
		pr.add(Row{Section: titlePoolWebhookScale, Path: "ratio: backlog drain, " + events + " delivered events / empty database", Figure: fmt.Sprintf("%.2f", s/e), Unit: "×", Value: s / e,
			Notes: fmt.Sprintf("postbox worker run, medians; %s: the aim is ≥ 0.9×, as for email", verdict(s/e >= 0.9))})
	}
	for _, hold := range []bool{false, true} {
		held := "nothing held"
		if hold {
			held = "snapshot held"
		}
		if e, s := median(p99[key{false, hold}]), median(p99[key{true, hold}]); e > 0 {
			pr.add(Row{Section: titlePoolWebhookScale, Path: fmt.Sprintf("ratio: p99 at %d events/s, %s delivered events / empty database, %s", pr.po.ScaleRate, events, held),
				Figure: fmt.Sprintf("%.2f", s/e), Unit: "×", Value: s / e,
				Notes: fmt.Sprintf("postbox worker run, medians; %s: the aim is ≤ 1.25×, as for email", verdict(s/e <= 1.25))})
		}
	}
	return nil
}

// hookScaleRun offers ScaleRate events/s for ScaleDuration to one
// endpoint (the seeded one, on the seeded database) answering after
// ReceiverDelay, with rc processes of c's path, and reports commit →
// request received: the whole run's p50 and p99 and the p99 of its first
// and last fifths (by commit time), where a cost growing with dead tuples
// shows, and the machine's CPU per delivery. It returns the p99 in ms.
func (pr *poolRunner) hookScaleRun(ctx context.Context, c hookScaleCase, rc int) (float64, error) {
	label := c.label(pr.po, rc)
	if !c.seeded {
		if err := pr.truncate(ctx); err != nil {
			return 0, err
		}
	}
	hooks := startReceiversWith(1, receiverOptions{delay: pr.po.ReceiverDelay})
	defer hooks.close()
	app, err := pr.pool(ctx, hookLoadWorkers)
	if err != nil {
		return 0, err
	}
	defer app.Close()
	var fn load
	if c.p.peer != nil {
		if fn, err = pr.hookPeerLoad(app, c.p, hooks.servers[0].URL); err != nil {
			return 0, err
		}
	} else {
		if err := pr.hookScaleEndpoint(ctx, hooks, c.seeded); err != nil {
			return 0, err
		}
		fn = pr.eventLoad(app)
	}
	runStart := time.Now()
	procs, _, stop, err := pr.startHooks(ctx, c.p, rc, pr.po.WebhookConcurrency, "webhook scale "+label)
	if err != nil {
		return 0, err
	}
	defer stop()
	// The warm-up event also proves a new endpoint, so the run is not
	// under a new endpoint's cap.
	if _, err := fn(ctx, -1); err != nil {
		return 0, fmt.Errorf("pool webhook scale %s: warm-up: %w", label, err)
	}
	if _, err := pr.waitEveryHook(ctx, hooks, 1, time.Minute, "pool webhook scale: "+label+" warm-up", procs); err != nil {
		return 0, err
	}
	pr.logf("pool webhook scale: %s, %d events/s for %s", label, pr.po.ScaleRate, pr.po.ScaleDuration)
	commits, achieved, busy, release, err := pr.offerScale(ctx, c.hold, hookLoadWorkers, fn)
	if err != nil {
		return 0, fmt.Errorf("pool webhook scale %s: %w", label, err)
	}
	defer release()
	total := len(commits)
	// total+1: the warm-up delivery is among them.
	w, err := pr.waitEveryHook(ctx, hooks, total+1, 2*time.Minute, "pool webhook scale: "+label+", after the load ended", procs)
	if err != nil {
		return 0, err
	}
	cpu := w.busyTo - busy
	arrived := map[string]time.Time{}
	for _, h := range hooks.log() {
		if _, seen := arrived[h.key.id]; !seen && h.status < 300 {
			arrived[h.key.id] = h.at
		}
	}
	for id := range commits {
		if _, ok := arrived[id]; !ok {
			return 0, checkf("pool webhook scale %s: event %s committed but never received", label, id)
		}
	}
	whole, head, tail := byFifths(commits, arrived)
	history := ""
	if c.seeded {
		if history, err = pr.joinedHistory(ctx, runStart, total+1); err != nil {
			return 0, fmt.Errorf("pool webhook scale %s: %w", label, err)
		}
	}
	pr.add(Row{Section: titlePoolWebhookScale, Path: label,
		Figure: fmtMs(whole[0]) + " / " + fmtMs(whole[1]) + " / " + fmtMs(head) + " / " + fmtMs(tail), Unit: "ms p50/p99/p99 first fifth/p99 last fifth",
		Value: float64(whole[1]) / float64(time.Millisecond),
		Notes: fmt.Sprintf("commit → request received, receiver delay %s; last fifth %.1f× the first; max %s ms; %d committed over %s (achieved %.0f/s; postbox: every tenth by webhook.Enqueue, the rest by plain SQL), all received once; machine CPU %s per delivery; %s; WEBHOOK_CONCURRENCY=%d per process; %s",
			pr.po.ReceiverDelay, float64(tail)/float64(max(head, 1)), fmtMs(whole[2]), total, pr.po.ScaleDuration, achieved,
			fmtCPU(cpu, total), deadTuples(ctx, pr.ctl, c.p, "webhook_outbox", "webhook_deliveries")+history, pr.po.WebhookConcurrency, c.p.notes(pr.po))})
	return float64(whole[1]) / float64(time.Millisecond), nil
}

// joinedHistory checks that a seeded run's want deliveries, made since
// from, went to the seeded endpoint beside its history, and says so.
func (pr *poolRunner) joinedHistory(ctx context.Context, from time.Time, want int) (string, error) {
	var joined, kept int64
	err := pr.ctl.QueryRow(ctx, `SELECT count(*) FILTER (WHERE d.created_at >= $1), count(*) FROM webhook_deliveries d
WHERE d.endpoint_id = (SELECT id FROM webhook_endpoints ORDER BY created_at LIMIT 1)`, from).Scan(&joined, &kept)
	if err != nil {
		return "", err
	}
	if joined != int64(want) {
		return "", checkf("%d deliveries of the run are on the seeded endpoint, want %d", joined, want)
	}
	return fmt.Sprintf("; the run's %d deliveries joined the seeded endpoint's history (%d deliveries in all)", joined, kept), nil
}

// hookScaleDrain inserts ScaleBacklog events before rc processes start
// and times them until every delivery arrived, on the empty or the seeded
// database, with the statistics as they were and a CHECKPOINT first.
func (pr *poolRunner) hookScaleDrain(ctx context.Context, rc int, seeded bool) (float64, error) {
	n := pr.po.ScaleBacklog
	label := "backlog drain " + fmtCount(n) + ", " + hookScaleCase{p: pathPostbox, seeded: seeded}.label(pr.po, rc)
	if !seeded {
		if err := pr.truncate(ctx); err != nil {
			return 0, err
		}
	}
	hooks := startReceiversWith(1, receiverOptions{delay: pr.po.ReceiverDelay})
	defer hooks.close()
	if err := pr.hookScaleEndpoint(ctx, hooks, seeded); err != nil {
		return 0, err
	}
	if !seeded {
		// The steady runs proved the seeded endpoint; a new one would
		// drain its first WEBHOOK_CONCURRENCY under the new endpoint's cap.
		if _, err := pr.ctl.Exec(ctx, `UPDATE webhook_endpoints SET proven_at = now()`); err != nil {
			return 0, err
		}
	}
	pr.logf("pool webhook scale: %s: inserting %d events", label, n)
	if _, err := pr.insertEvents(ctx, n); err != nil {
		return 0, fmt.Errorf("pool webhook scale %s: %w", label, err)
	}
	if _, err := pr.ctl.Exec(ctx, "CHECKPOINT"); err != nil {
		pr.logf("pool webhook scale: CHECKPOINT refused (%v)", err)
	}
	busy := machineBusy()
	procs, started, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, "webhook scale "+label)
	if err != nil {
		return 0, err
	}
	defer stop()
	w, err := pr.waitEveryHook(ctx, hooks, n, backlogLimit, "pool webhook scale: "+label, procs)
	if err != nil {
		return 0, err
	}
	rate := perSecond(n, w.doneAt.Sub(started))
	pr.add(Row{Section: titlePoolWebhookScale, Path: label, Figure: fmtRate(rate), Unit: "deliveries/s from start", Value: rate,
		Notes: fmt.Sprintf("%d events before the processes started (every tenth by webhook.Enqueue), statistics as they were; %.2f s from the exec; machine CPU %s per delivery; receiver delay %s; WEBHOOK_CONCURRENCY=%d per process; %s",
			n, w.doneAt.Sub(started).Seconds(), fmtCPU(w.busyTo-busy, n), pr.po.ReceiverDelay, pr.po.WebhookConcurrency, hookLimitNote(rc, pr.po.WebhookConcurrency, 1, pr.po.ReceiverDelay, rate))})
	return rate, nil
}

// hookScaleEndpoint points the load at the receiver: on the seeded
// database the seeded endpoint, whose history the load's deliveries join,
// moves to the receiver's address; on the empty one an endpoint is made.
func (pr *poolRunner) hookScaleEndpoint(ctx context.Context, hooks *receivers, seeded bool) error {
	if !seeded {
		_, err := pr.hookEndpoints(ctx, hooks)
		return err
	}
	tag, err := pr.ctl.Exec(ctx, `UPDATE webhook_endpoints SET url = $1 WHERE id = (SELECT id FROM webhook_endpoints ORDER BY created_at LIMIT 1)`, hooks.servers[0].URL)
	if err != nil {
		return fmt.Errorf("point the seeded endpoint at the receiver: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return checkf("the seeded database has no endpoint")
	}
	return nil
}

// hookPeerLoad is the River peer's enqueue for one endpoint: one job per
// delivery, inserted in its own transaction as an application would
// beside its own write; the id is the webhook-id the worker sends.
func (pr *poolRunner) hookPeerLoad(app *pgxpool.Pool, p path, url string) (load, error) {
	client, err := peerInserter(app, p.peer.cooldown)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, i int) (string, error) {
		id := "evt_" + strconv.Itoa(i)
		args := peerHookArgs{URL: url, EventID: id, Payload: fmt.Appendf(nil, `{"invoice_id":"in_%d","amount_due":12000,"currency":"eur"}`, i)}
		err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			_, err := client.InsertTx(ctx, tx, args, nil)
			return err
		})
		return id, err
	}, nil
}
