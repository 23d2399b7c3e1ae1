package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine/history"
)

// The retention section prices retention by partition on a database that
// keeps RetentionDays of history in each log (email_attempts,
// email_events, webhook_delivery_attempts, RetentionRows rows each),
// with a REPEATABLE READ snapshot held as a report or pg_dump holds one:
// a `worker run` serves a steady plain-SQL load twice, once as it is and
// once while the history pass's drop (history.Drop, the pass's own code)
// takes every week past a 14-day retention out, and the section reports
// each week's detach and drop, and commit → DATA accepted in both runs:
// over the whole run, and over the messages committed while the drop
// ran (plus a second on each side).

// RetentionDays is how far back the retention section's seeded history
// reaches, and retentionKeep what its drop keeps.
const (
	RetentionDays = 30
	retentionKeep = 14 * 24 * time.Hour
)

// retentionSeedSQL fills one log with rows spread evenly over the seeded
// days, oldest first. The logs hold no foreign key (migration 00018), so
// the row and delivery ids need no rows behind them.
var retentionSeedSQL = map[history.Table]string{
	history.EmailAttempts: `INSERT INTO email_attempts (row_id, attempt, outcome, error, at)
SELECT postbox_uuidv7(), 1 + i % 3, CASE WHEN i % 3 = 2 THEN 'sent' ELSE 'retry' END,
	CASE WHEN i % 3 = 2 THEN NULL ELSE '451 4.3.0 try again later' END,
	now() - $2::interval + (i::float8 / $1) * $2::interval
FROM generate_series(0, $1 - 1) i`,
	history.EmailEvents: `INSERT INTO email_events (row_id, type, provider, provider_event_id, provider_message_id, recipient, received_at)
SELECT postbox_uuidv7(), 'delivered', 'postmark', 'ev-' || i, 'pm-' || i, 'user' || (i % 100000) || '@example.com',
	now() - $2::interval + (i::float8 / $1) * $2::interval
FROM generate_series(0, $1 - 1) i`,
	history.WebhookDeliveryAttempts: `INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, response_excerpt, created_at)
SELECT postbox_uuidv7(), 1, 200, 40 + i % 20, 'ok', now() - $2::interval + (i::float8 / $1) * $2::interval
FROM generate_series(0, $1 - 1) i`,
}

// seedRetention makes the seeded weeks and fills each log.
func (pr *poolRunner) seedRetention(ctx context.Context) error {
	span := time.Duration(RetentionDays) * 24 * time.Hour
	start := time.Now()
	for _, t := range history.Tables {
		if _, err := pr.ctl.Exec(ctx, `SELECT postbox_history_partitions($1::regclass, now() - $2::interval, now())`, string(t), span); err != nil {
			return fmt.Errorf("pool retention: make the seeded weeks of %s: %w", t, err)
		}
		pr.logf("pool retention: seeding %s rows into %s", fmtCount(pr.po.RetentionRows), t)
		if _, err := pr.ctl.Exec(ctx, retentionSeedSQL[t], pr.po.RetentionRows, span); err != nil {
			return fmt.Errorf("pool retention: seed %s: %w", t, err)
		}
	}
	if _, err := pr.ctl.Exec(ctx, `VACUUM (ANALYZE) email_attempts, email_events, webhook_delivery_attempts`); err != nil {
		return err
	}
	// The seed wrote about a gigabyte of WAL: a checkpoint now, not in
	// the middle of the timed run, where its writes would slow the marks'
	// commits.
	if _, err := pr.ctl.Exec(ctx, "CHECKPOINT"); err != nil {
		pr.logf("pool retention: CHECKPOINT refused (%v)", err)
	}
	pr.logf("pool retention: seeded in %s", time.Since(start).Round(time.Second))
	return nil
}

func (pr *poolRunner) retentionSection(ctx context.Context) error {
	var ratios []float64
	err := pr.trials(ctx, []int{1}, func(ctx context.Context, _, _ int) error {
		without, _, err := pr.retentionRun(ctx, false)
		if err != nil {
			return err
		}
		_, during, err := pr.retentionRun(ctx, true)
		if err != nil {
			return err
		}
		if without > 0 {
			ratios = append(ratios, during/without)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(ratios) > 0 {
		pr.add(Row{Section: titlePoolRetention, Path: "ratio: p99 while the drop ran / p99 of the run without it", Figure: fmt.Sprintf("%.2f", median(ratios)),
			Unit: "×", Value: median(ratios), Notes: fmt.Sprintf("postbox worker run, medians over %d trial(s): %s; the aim is ≤ 1.5×", len(ratios), fmtRatios(ratios))})
	}
	return nil
}

func fmtRatios(vs []float64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(s, ", ")
}

// retentionRun offers ScaleRate msg/s for ScaleDuration to one worker run
// beside a held snapshot; with drop, the drop starts a third of the way
// in. It returns the run's p99, and the p99 of the messages committed
// while the drop ran, a second either side (the whole run's without it),
// in ms.
func (pr *poolRunner) retentionRun(ctx context.Context, drop bool) (whole, window float64, err error) {
	label := "steady load, no drop"
	if drop {
		label = fmt.Sprintf("steady load, drop of the weeks past %s", history.FormatRetention(retentionKeep))
	}
	if err := pr.truncate(ctx); err != nil {
		return 0, 0, err
	}
	if err := pr.seedRetention(ctx); err != nil {
		return 0, 0, err
	}
	app, err := pr.pool(ctx, appConns)
	if err != nil {
		return 0, 0, err
	}
	defer app.Close()
	fn := pr.scaleLoad(app)
	rs, err := pr.relays(1)
	if err != nil {
		return 0, 0, err
	}
	defer rs.close()
	procs, _, err := pr.start(ctx, pathPostbox, rs, 1, "retention "+label)
	if err != nil {
		return 0, 0, fmt.Errorf("pool retention %s: %w", label, err)
	}
	defer pr.stop(procs)
	if err := pr.warmUp(ctx, fn, rs, procs, "pool retention: "+label); err != nil {
		return 0, 0, err
	}
	release, err := holdSnapshot(ctx, pr.url)
	if err != nil {
		return 0, 0, err
	}
	defer release()

	done := make(chan dropTiming, 1)
	if drop {
		go func() {
			select {
			case <-time.After(pr.po.ScaleDuration / 3):
			case <-ctx.Done():
				done <- dropTiming{err: ctx.Err()}
				return
			}
			done <- pr.timedDrop(ctx, pr.ctl)
		}()
	}
	total := max(1, int(float64(pr.po.ScaleRate)*pr.po.ScaleDuration.Seconds()))
	pr.logf("pool retention: %s, %d msg/s for %s", label, pr.po.ScaleRate, pr.po.ScaleDuration)
	busy := machineBusy()
	commits, achieved, err := openLoop(ctx, pr.po.ScaleRate, total, appConns, fn)
	if err != nil {
		return 0, 0, fmt.Errorf("pool retention %s: %w", label, err)
	}
	ids := make([]string, 0, len(commits))
	for id := range commits {
		ids = append(ids, id)
	}
	t, all, err := pr.waitAll(ctx, rs, ids, 2*time.Minute, "pool retention: "+label, procs)
	if err != nil {
		return 0, 0, err
	}
	cpu := machineBusy() - busy
	if !all || t.dups != 0 {
		return 0, 0, checkf("pool retention %s: %d of %d arrived, %d duplicates", label, t.received, total, t.dups)
	}
	var d dropTiming
	if drop {
		d = <-done
		if d.err != nil {
			return 0, 0, fmt.Errorf("pool retention: the drop: %w", d.err)
		}
		if len(d.weeks) == 0 {
			return 0, 0, checkf("pool retention: the drop took no week out")
		}
		var parts []string
		var slowest, slowestLock time.Duration
		for _, w := range d.weeks {
			parts = append(parts, fmt.Sprintf("%s %s (drop %s)", w.Partition, fmtMs(w.Took), fmtMs(w.Locked)))
			slowest, slowestLock = max(slowest, w.Took), max(slowestLock, w.Locked)
		}
		pr.add(Row{Section: titlePoolRetention, Path: fmt.Sprintf("drop: %d weeks past %s", len(d.weeks), history.FormatRetention(retentionKeep)),
			Figure: fmtMs(slowest) + " / " + fmtMs(slowestLock), Unit: "ms, the slowest week: detach CONCURRENTLY + drop / the drop's exclusive lock", Value: float64(slowestLock) / float64(time.Millisecond),
			Notes: fmt.Sprintf("every week: %s; %s in all; the marks write the current week throughout", strings.Join(parts, ", "), fmtMs(d.end.Sub(d.start)))})
	}
	var all99, win []time.Duration
	for id, at := range commits {
		lat := first(t.byID[id]).at.Sub(at)
		all99 = append(all99, lat)
		if !drop || (!at.Before(d.start.Add(-time.Second)) && !at.After(d.end.Add(time.Second))) {
			win = append(win, lat)
		}
	}
	w := percentiles(all99, 50, 99, 100)
	p := percentiles(win, 99)[0]
	pr.add(Row{Section: titlePoolRetention, Path: label, Figure: fmtMs(w[0]) + " / " + fmtMs(w[1]) + " / " + fmtMs(p), Unit: "ms p50/p99/p99 while the drop ran",
		Value: float64(w[1]) / float64(time.Millisecond),
		Notes: fmt.Sprintf("commit → DATA accepted, relay delay %s; %d days of history, %s rows in each of the 3 logs; snapshot held; max %s ms; %d committed by plain SQL (achieved %.0f/s), %d in the drop's window, 0 lost, 0 duplicates; machine CPU %s per message",
			pr.po.RelayDelay, RetentionDays, fmtCount(pr.po.RetentionRows), fmtMs(w[2]), total, achieved, len(win), fmtCPU(cpu, total))})
	return float64(w[1]) / float64(time.Millisecond), float64(p) / float64(time.Millisecond), nil
}

// dropTiming is one run of the pass's drop, timed.
type dropTiming struct {
	weeks      []history.Week
	start, end time.Time
	err        error
}

// timedDrop runs the history pass's drop of the weeks past retentionKeep.
func (pr *poolRunner) timedDrop(ctx context.Context, db *pgxpool.Pool) dropTiming {
	d := dropTiming{start: time.Now()}
	d.weeks, d.err = history.Drop(ctx, db, history.Retention{Email: retentionKeep, Webhook: retentionKeep})
	d.end = time.Now()
	return d
}
