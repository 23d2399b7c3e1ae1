package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/outbox"
)

// wakeTrigger is the statement-level AFTER INSERT trigger that wakes the
// workers when rows are enqueued (migration 00005).
const wakeTrigger = "email_outbox_wake"

// setWakeTrigger turns email_outbox's wake-up trigger on or off, for the
// enqueue figures with and without it.
func setWakeTrigger(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, on bool) error {
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	_, err := db.Exec(ctx, "ALTER TABLE email_outbox "+verb+" TRIGGER "+wakeTrigger)
	return err
}

// enqueueSection measures outbox.Enqueue, each in its own transaction from
// EnqueueGoroutines goroutines for EnqueueDuration, with the worker
// processes running, once with the wake-up trigger enabled and once
// disabled.
func (pr *poolRunner) enqueueSection(ctx context.Context) error {
	type key struct {
		replicas int
		on       bool
	}
	rates := map[key][]float64{}
	variants := []bool{true, false}
	err := pr.trials(ctx, pr.po.Replicas, func(ctx context.Context, t, rc int) error {
		for _, on := range rotate(variants, t) {
			rate, err := pr.enqueueRun(ctx, rc, on)
			if err != nil {
				return err
			}
			rates[key{rc, on}] = append(rates[key{rc, on}], rate)
		}
		return nil
	})
	if terr := setWakeTrigger(ctx, pr.ctl, true); terr != nil && err == nil {
		err = terr
	}
	if err != nil {
		return err
	}
	for _, rc := range pr.po.Replicas {
		on, off := rates[key{rc, true}], rates[key{rc, false}]
		if median(off) <= 0 {
			continue
		}
		ratio := median(on) / median(off)
		pr.add(Row{Section: titlePoolEnqueue, Path: rp(rc) + "wake-up cost: with / without", Figure: fmt.Sprintf("%.2f", ratio), Unit: "×", Value: ratio,
			Notes: fmt.Sprintf("%+.1f%% enqueue throughput with the trigger, medians; the target is a cost ≤ 10%% (≥ 0.90×)", (ratio-1)*100)})
	}
	return nil
}

func (pr *poolRunner) enqueueRun(ctx context.Context, rc int, on bool) (float64, error) {
	label := rp(rc) + "outbox.Enqueue, wake trigger disabled"
	if on {
		label = rp(rc) + "outbox.Enqueue, wake trigger enabled"
	}
	if err := pr.truncate(ctx); err != nil {
		return 0, err
	}
	if err := setWakeTrigger(ctx, pr.ctl, on); err != nil {
		return 0, err
	}
	g := pr.po.EnqueueGoroutines
	app, err := pr.pool(ctx, g+poolReserve)
	if err != nil {
		return 0, err
	}
	defer app.Close()
	rs, err := pr.relays(rc)
	if err != nil {
		return 0, err
	}
	defer rs.close()
	procs, _, err := pr.start(ctx, pathPostbox, rs, rc, "enqueue "+label)
	if err != nil {
		return 0, fmt.Errorf("pool enqueue %s: %w", label, err)
	}
	defer pr.stop(procs)
	if err := pr.settle(ctx, pr.ctl, "email_outbox"); err != nil {
		return 0, err
	}

	pr.logf("pool enqueue: %s: %d goroutines for %s", label, g, pr.po.EnqueueDuration)
	var enq outbox.Enqueuer
	n, elapsed, lat, err := enqueueFor(ctx, app, g, pr.po.EnqueueDuration, func(ctx context.Context, tx pgx.Tx, i int) error {
		_, err := enq.Enqueue(ctx, tx, pr.message(i))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pool enqueue %s: %w", label, err)
	}
	var rows int
	if err := pr.ctl.QueryRow(ctx, `SELECT count(*) FROM email_outbox`).Scan(&rows); err != nil {
		return 0, err
	}
	if rows != n {
		return 0, checkf("pool enqueue %s: %d rows in email_outbox, %d enqueues committed", label, rows, n)
	}
	rate := perSecond(n, elapsed)
	ps := percentiles(lat, 50, 99)
	pr.add(Row{Section: titlePoolEnqueue, Path: label, Figure: fmtRate(rate), Unit: "tx/s", Value: rate,
		Notes: fmt.Sprintf("%d txs by %d goroutines in %.1f s, %d worker process(es) running; per tx p50 %s ms, p99 %s ms; %d delivered meanwhile",
			n, g, elapsed.Seconds(), rc, fmtMs(ps[0]), fmtMs(ps[1]), rs.total())})
	return rate, nil
}

// enqueueFor calls enqueue, each call in a transaction of its own on app,
// from g goroutines until d has passed (loadFor).
func enqueueFor(ctx context.Context, app *pgxpool.Pool, g int, d time.Duration, enqueue func(ctx context.Context, tx pgx.Tx, i int) error) (int, time.Duration, []time.Duration, error) {
	return loadFor(ctx, g, d, func(ctx context.Context, i int) error {
		return pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error { return enqueue(ctx, tx, i) })
	})
}

// loadFor calls do with 1, 2, 3… from g goroutines until d has passed,
// and stops them all at the first error. It returns how many calls
// succeeded, in how long, and each one's latency.
func loadFor(ctx context.Context, g int, d time.Duration, do func(ctx context.Context, i int) error) (int, time.Duration, []time.Duration, error) {
	var (
		next  atomic.Int64
		count atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []time.Duration
		first error
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	deadline := start.Add(d)
	for range g {
		wg.Go(func() {
			var mine []time.Duration
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			for time.Now().Before(deadline) && runCtx.Err() == nil {
				i := int(next.Add(1))
				t0 := time.Now()
				if err := do(runCtx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
				mine = append(mine, time.Since(t0))
				count.Add(1)
			}
		})
	}
	wg.Wait()
	return int(count.Load()), time.Since(start), lat, first
}
