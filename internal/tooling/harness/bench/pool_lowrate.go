package bench

import (
	"context"
	"fmt"
	"time"
)

// The low-rate section measures what most installations spend most hours
// doing: a few messages a second, or none. One replica, the relay
// answering at once, rows by plain SQL (the peer: InsertTx), postbox and
// one River job per message (River's defaults, MaxWorkers 100) in the
// same trial. Per message it reports the machine's CPU over the whole run
// — the idle machine and the idle pool included, which is the point — and
// the database's statements; then each product idle for IdleFor, per
// second.
var lowRateVariants = []latencyVariant{
	{name: "postbox, plain SQL INSERT", p: pathPostbox},
	{name: "River peer, defaults, InsertTx", p: pathPeerDefaults},
}

// lowRatePeerWorkers is the River peer's MaxWorkers here, unless
// --peer-workers says otherwise.
const lowRatePeerWorkers = 100

func (pr *poolRunner) lowRateSection(ctx context.Context) error {
	defer func(d time.Duration, w int) { pr.po.RelayDelay, pr.po.PeerWorkers = d, w }(pr.po.RelayDelay, pr.po.PeerWorkers)
	pr.po.RelayDelay = 0
	if pr.po.PeerWorkers == 0 {
		// River fetches at most MaxWorkers jobs per FetchCooldown (100 ms):
		// at 16 it falls behind 200 msg/s. 100, as in River's examples.
		pr.po.PeerWorkers = lowRatePeerWorkers
	}
	_ = pr.enableStatements(ctx)
	if err := pr.idleBaseline(ctx); err != nil {
		return err
	}
	return pr.trials(ctx, []int{1}, func(ctx context.Context, t, rc int) error {
		for _, rate := range pr.po.LowRates {
			for _, v := range rotate(lowRateVariants, t) {
				if err := pr.lowRateRun(ctx, v, rate); err != nil {
					return err
				}
			}
		}
		for _, v := range rotate(lowRateVariants, t) {
			if err := pr.idleRun(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (pr *poolRunner) lowRateRun(ctx context.Context, v latencyVariant, rate int) error {
	label := fmt.Sprintf("%d msg/s, %s", rate, v.name)
	st, err := pr.steadyRun(ctx, v, 1, rate, pr.po.LowRateDuration, "pool low rate: "+label)
	if err != nil {
		return err
	}
	n := len(st.lat)
	ps := percentiles(st.lat, 50, 99, 100)
	pr.add(Row{Section: titlePoolLowRate, Path: label,
		Figure: fmtCPU(st.split.machine, n) + " / " + fmtMs(ps[1]) + " / " + fmtMs(ps[2]), Unit: "ms machine CPU per message / p99 / max",
		Value: float64(st.split.machine) / float64(time.Millisecond) / float64(max(n, 1)),
		Notes: fmt.Sprintf("%.1f %s per message; per message %s; p50 %s ms commit → DATA accepted, relay 0; %d committed over %s (achieved %.1f/s), all received once; machine CPU %.1f ms/s over %.0f s; %s",
			float64(st.stmts.n)/float64(max(n, 1)), st.stmts.what, st.split.perMessage(v.p.processName(), n), fmtMs(ps[0]), n, pr.po.LowRateDuration, st.achieved,
			float64(st.split.machine)/float64(time.Millisecond)/st.elapsed.Seconds(), st.elapsed.Seconds(), v.p.notes(pr.po))})
	return nil
}

// idleRun starts one process of v, sends it one message so that it has
// worked (and its leader is elected), lets it settle, and then counts
// what the machine and the database do for IdleFor with nothing to send.
func (pr *poolRunner) idleRun(ctx context.Context, v latencyVariant) error {
	label := "idle, " + v.name
	w, err := pr.startWarm(ctx, v, 1, "pool low rate: "+label)
	if err != nil {
		return err
	}
	defer w.close(pr)
	w.app.Close() // the load's connections are not part of an idle pool
	pr.logf("pool low rate: %s for %s", label, pr.po.IdleFor)
	// simulates: the quiet hours this measures, after the warm-up settles.
	if err := quietFor(ctx, 5*time.Second); err != nil {
		return err
	}
	began, stmts, split := time.Now(), pr.statements(ctx), splitFrom(ctx, pr.ctl, w.procs)
	if err := quietFor(ctx, pr.po.IdleFor); err != nil {
		return err
	}
	secs := time.Since(began).Seconds()
	c := split()
	done := pr.statements(ctx).since(stmts)
	perSec := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / secs }
	pr.add(Row{Section: titlePoolLowRate, Path: label,
		Figure: fmt.Sprintf("%.1f / %.1f / %.1f", perSec(c.product+c.postgres), perSec(c.machine), float64(done.n)/secs),
		Unit:   "ms CPU per second, process and its backends / machine / " + done.what + " per second",
		Value:  perSec(c.product + c.postgres),
		Notes: fmt.Sprintf("no rows for %.0f s after one message and 5 s to settle; %s %.1f, its Postgres backends %.1f ms/s; the machine's figure includes its own idle cost (the row with nothing running); %s",
			secs, v.p.processName(), perSec(c.product), perSec(c.postgres), v.p.notes(pr.po))})
	return nil
}

// idleBaseline counts the machine with no process of either product up:
// what the rows above include without doing anything.
func (pr *poolRunner) idleBaseline(ctx context.Context) error {
	pr.logf("pool low rate: nothing running for %s", pr.po.IdleFor)
	began, busy := time.Now(), machineBusy()
	if err := quietFor(ctx, pr.po.IdleFor); err != nil {
		return err
	}
	secs := time.Since(began).Seconds()
	perSec := float64(machineBusy()-busy) / float64(time.Millisecond) / secs
	pr.add(Row{Section: titlePoolLowRate, Path: "idle, nothing running (the machine itself)",
		Figure: fmt.Sprintf("%.1f", perSec), Unit: "ms machine CPU per second", Value: perSec,
		Notes: fmt.Sprintf("over %.0f s; the bench process and Postgres up, no worker", secs)})
	return nil
}

// statements counts the database's work: the calls pg_stat_statements
// saw in the bench database where the server preloads it, else the
// database's transactions (pg_stat_database: a busy backend reports them
// about once a second, an idle one within 10 s, so short runs undercount).
// Either way the load's own inserts are included: one each per message.
type statements struct {
	n    int64
	what string
}

func (s statements) since(before statements) statements {
	return statements{n: s.n - before.n, what: s.what}
}

func (pr *poolRunner) statements(ctx context.Context) statements {
	var n int64
	err := pr.ctl.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
	if err == nil {
		return statements{n: n, what: "statements"}
	}
	_ = pr.ctl.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return statements{n: n, what: "transactions"}
}

// enableStatements creates pg_stat_statements' view in the bench database;
// it reads only where the server preloads the library.
func (pr *poolRunner) enableStatements(ctx context.Context) error {
	_, err := pr.ctl.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err
}

// quietFor lets d pass with nothing offered, or ctx end.
func quietFor(ctx context.Context, d time.Duration) error {
	// simulates: the quiet hours the idle rows measure.
	quiet := time.NewTimer(d)
	defer quiet.Stop()
	select {
	case <-quiet.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
