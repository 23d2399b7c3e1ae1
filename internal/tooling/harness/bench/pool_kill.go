package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/postbox/postbox/leases"
)

// leaderKillSection offers a steady KillRate by plain SQL, kills the River
// leader with SIGKILL after KillAfter, keeps the load going for KillLoad,
// and reports the longest gap between two consecutive deliveries, and
// whether every row arrived once the remaining replicas finished. It runs
// for every replica count of at least 2 (2 if there is none).
func (pr *poolRunner) leaderKillSection(ctx context.Context) error {
	var counts []int
	for _, rc := range pr.po.Replicas {
		if rc >= 2 {
			counts = append(counts, rc)
		}
	}
	if len(counts) == 0 {
		counts = []int{2}
	}
	return pr.trials(ctx, counts, pr.leaderKillRun)
}

// killSettle is how long the survivors get to deliver every row after the
// load: a row the dead leader had claimed waits for its claim lease.
func killSettle() time.Duration {
	return killSettleFor(leases.Default())
}

// killQuickSettle is how long after the load the survivors get before the
// rows still missing count as stranded on the dead replica's lease.
const killQuickSettle = 30 * time.Second

func killSettleFor(lc leases.Config) time.Duration {
	return lc.ClaimLease(lc.BatchSize) + 30*time.Second
}

func (pr *poolRunner) leaderKillRun(ctx context.Context, _ int, rc int) error {
	label := fmt.Sprintf("%skill -9 the leader at %d msg/s", rp(rc), pr.po.KillRate)
	w, err := pr.startWarm(ctx, latencyVariant{p: pathPostbox}, rc, "pool leader kill: "+label)
	if err != nil {
		return err
	}
	defer w.close(pr)
	fn, rs, procs := w.fn, w.rs, w.procs

	total := int(float64(pr.po.KillRate) * (pr.po.KillAfter + pr.po.KillLoad).Seconds())
	pr.logf("pool leader kill: %s: %d msg/s for %s, SIGKILL of the leader after %s", label, pr.po.KillRate, pr.po.KillAfter+pr.po.KillLoad, pr.po.KillAfter)
	type killed struct {
		p   *proc
		at  time.Time
		err error
	}
	kc := make(chan killed, 1)
	go func() {
		select {
		case <-time.After(pr.po.KillAfter):
		case <-ctx.Done():
			kc <- killed{err: ctx.Err()}
			return
		}
		conn, err := pr.ctl.Acquire(ctx)
		if err != nil {
			kc <- killed{err: err}
			return
		}
		defer conn.Release()
		p, err := leader(ctx, conn.Conn(), procs, 30*time.Second)
		if err != nil {
			kc <- killed{err: err}
			return
		}
		at := time.Now()
		p.kill9()
		kc <- killed{p: p, at: at}
	}()
	commits, achieved, err := openLoop(ctx, pr.po.KillRate, total, appConns, fn)
	k := <-kc
	if err != nil {
		return fmt.Errorf("pool leader kill: %w", err)
	}
	if k.err != nil {
		return fmt.Errorf("pool leader kill: %w", k.err)
	}
	pr.logf("pool leader kill: killed %s (pid %d); waiting for the survivors to deliver everything (up to %s)", k.p.name, k.p.pid(), killSettle())
	ids := make([]string, 0, len(commits))
	for id := range commits {
		ids = append(ids, id)
	}
	var alive []*proc
	for _, p := range procs {
		if p != k.p {
			alive = append(alive, p)
		}
	}
	// First the survivors' ordinary pace; what is still missing then was
	// claimed by the dead replica and waits for its claim lease.
	t, all, err := pr.waitAll(ctx, rs, ids, killQuickSettle, "pool leader kill", alive)
	if err != nil {
		return err
	}
	quickEnd := time.Now()
	stranded := len(ids) - t.received
	if !all {
		pr.logf("pool leader kill: %d rows still missing %s after the load; waiting for the dead replica's claim lease (up to %s)", stranded, killQuickSettle, killSettle())
		if t, _, err = pr.waitAll(ctx, rs, ids, killSettle(), "pool leader kill", alive); err != nil {
			return err
		}
	}
	time.Sleep(500 * time.Millisecond)
	t = rs.tally(ids)
	lost := len(ids) - t.received

	// The gap is of the flow under load: deliveries until the quick settle
	// ended. Rows stranded on the dead replica's lease arrive minutes
	// later; they are counted, not measured as a gap.
	var ats []time.Time
	for _, id := range ids {
		for _, d := range t.byID[id] {
			if !d.at.After(quickEnd) {
				ats = append(ats, d.at)
			}
		}
	}
	slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	var gapAt time.Time
	for i := 1; i < len(ats); i++ {
		if g := ats[i].Sub(ats[i-1]); g > gap {
			gap, gapAt = g, ats[i-1]
		}
	}
	shares, _ := fmtShares(t.perSink)
	pr.add(Row{Section: titlePoolKill, Path: label + ": longest gap between deliveries", Figure: fmtMs(gap), Unit: "ms", Value: float64(gap) / float64(time.Millisecond),
		Notes: fmt.Sprintf("gap began %+.1f s from the kill of %s; %d committed (achieved %.0f/s), %d received, %d lost, %d duplicates (≤ 1 per row in flight is allowed); %d rows were still missing %s after the load (stranded on the dead replica's claim lease, not in the gap); last delivery %+.1f s from the kill; per replica %s",
			gapAt.Sub(k.at).Seconds(), k.p.name, len(ids), achieved, t.received, lost, t.dups, stranded, killQuickSettle, t.lastAt.Sub(k.at).Seconds(), shares)})
	if lost != 0 {
		return checkf("pool leader kill %s: %d of %d rows never arrived within %s after the load", label, lost, len(ids), killSettle())
	}
	return nil
}
