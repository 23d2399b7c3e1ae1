package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/outbox"
)

// The pool-fair section is one customer's flood against another's mail:
// customer A enqueues FairRows invoices at once, then customer B, as its
// users ask, a password reset and an invoice every second for FairLoad.
// Postbox claims the lower priority first (a reset is 2, an invoice 5)
// and, within one, takes the customers in turn (migration 00033), so B's
// mail should not queue behind A's. Beside it, on the same load: the
// previous release (first come, first served, when a baseline binary is
// given) and River with its own job priorities set as a user would (a
// reset 1, an invoice 2), which knows no customers.
const (
	fairRate       = 50                    // case 1's EMAIL_RATE_LIMIT, and the River peer's PEER_RATE
	fairConc       = 16                    // EMAIL_CONCURRENCY, and the River peer's MaxWorkers, of the one process
	fairRelayDelay = 50 * time.Millisecond // case 2's relay, per message
	fairChunk      = 5000                  // A's rows per transaction
	fairGap        = 2 * time.Second       // from A's last commit to B's first enqueue
	fairAimShare   = 0.95                  // A's rate against the limit (case 1); the throughput against the FIFO baseline's (case 2)
	fairCustomerA  = "A"
	fairCustomerB  = "B"
)

// fairCase is one of the section's two settings.
type fairCase struct {
	label      string
	limited    bool          // EMAIL_RATE_LIMIT=fairRate (the peer: PEER_RATE), so the limit and not the relay sets the pace
	delay      time.Duration // the relay's time per message
	aimReset   time.Duration // B's p99 commit → DATA, at most
	aimInvoice time.Duration
}

var fairCases = []fairCase{
	{label: fmt.Sprintf("EMAIL_RATE_LIMIT=%d, 1 replica, relay 0", fairRate), limited: true, aimReset: 2 * time.Second, aimInvoice: 5 * time.Second},
	{label: fmt.Sprintf("no rate limit, relay %s, EMAIL_CONCURRENCY=%d, 1 replica", fairRelayDelay, fairConc), delay: fairRelayDelay,
		aimReset: time.Second, aimInvoice: time.Second},
}

// fairRun is one path of a case, with or without a held snapshot.
type fairRun struct {
	p        path
	baseline bool // the previous release's binary
	hold     bool // a REPEATABLE READ snapshot open from before A's flood to the end
}

func (r fairRun) name() string {
	if r.hold {
		return r.p.name + ", snapshot held"
	}
	return r.p.name
}

// fairRuns are c's paths: postbox, the FIFO baseline when a binary is
// given, River tuned at the same MaxWorkers; then, with FairHold, the
// held-snapshot variants (postbox's only unless FairHoldAll: the FIFO
// paths drain all of A's backlog before B's last invoice, which at 50
// msg/s is minutes a run).
func (pr *poolRunner) fairRuns(c fairCase) []fairRun {
	env := []string{"EMAIL_CONCURRENCY=" + strconv.Itoa(fairConc)}
	peerRate := 0
	if c.limited {
		env = append(env, "EMAIL_RATE_LIMIT="+strconv.Itoa(fairRate))
		peerRate = fairRate
	}
	runs := []fairRun{{p: path{name: pathPostbox.name, env: env}}}
	if pr.po.FairBaseline != "" {
		runs = append(runs, fairRun{p: path{name: "postbox FIFO (baseline binary)", env: env, bin: pr.po.FairBaseline}, baseline: true})
	}
	runs = append(runs, fairRun{p: path{name: pathPeerTuned.name, peer: peerTuned, workers: fairConc, peerRate: peerRate}})
	return withHeld(runs, pr.po.FairHold, pr.po.FairHoldAll)
}

// withHeld is runs, then, with hold, each again with a snapshot held:
// postbox's path only (not the baseline binary's, not the River peer's)
// unless all.
func withHeld(runs []fairRun, hold, all bool) []fairRun {
	if !hold {
		return runs
	}
	for _, r := range slices.Clone(runs) {
		if all || (r.p.peer == nil && !r.baseline) {
			r.hold = true
			runs = append(runs, r)
		}
	}
	return runs
}

// snapshot holds a snapshot (holdSnapshot) when r.hold says so, from
// now until release, a no-op otherwise.
func (r fairRun) snapshot(ctx context.Context, url string) (release func(), err error) {
	if !r.hold {
		return func() {}, nil
	}
	return holdSnapshot(ctx, url)
}

// fairNotes says how run r was set up in case c.
func (pr *poolRunner) fairNotes(c fairCase, r fairRun) string {
	limit := ""
	if c.limited {
		limit = fmt.Sprintf(", EMAIL_RATE_LIMIT=%d", fairRate)
	}
	switch {
	case r.baseline:
		return fmt.Sprintf("EMAIL_CONCURRENCY=%d%s; the previous release's worker (%s): first come, first served, priority ignored; it boots on this schema unchanged (it refuses only a schema behind its own)",
			fairConc, limit, pr.po.FairBaseline)
	case r.p.peer != nil:
		n := fmt.Sprintf("MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s; River InsertOpts Priority 1 for resets, 2 for invoices (A's too); jobs carry a %d B text body, not a rendered template",
			r.p.peerWorkers(pr.po), r.p.peer.effCooldown, r.p.peer.effPoll, pr.po.BodyBytes)
		if r.p.peerRate > 0 {
			n += fmt.Sprintf("; PEER_RATE=%d per process: River has no pool-wide rate limit, so the peer's worker waits on a golang.org/x/time/rate limiter (burst %d) before each send, holding its slot",
				r.p.peerRate, peerLimiter(r.p.peerRate).Burst())
		}
		return n
	}
	return fmt.Sprintf("EMAIL_CONCURRENCY=%d%s; a reset is priority 2, an invoice 5 (the kinds' defaults, by the insert trigger), customers in turn within one", fairConc, limit)
}

// fairSection runs both cases on every path for every trial. Case 2's
// throughput is read against the FIFO baseline's of the same trial.
func (pr *poolRunner) fairSection(ctx context.Context) error {
	return pr.trials(ctx, []int{1}, func(ctx context.Context, t, _ int) error {
		for _, c := range fairCases {
			type done struct {
				r    fairRun
				rate float64
				row  int // the index of its throughput row in the report
			}
			var runs []done
			order := rotate(pr.fairRuns(c), t)
			pr.logf("pool fair: %s: %s", c.label, fairSummary(order))
			for _, r := range order {
				rate, err := pr.fairRunOnce(ctx, c, r)
				if err != nil {
					return err
				}
				runs = append(runs, done{r, rate, len(pr.rep.Rows) - 1})
			}
			if c.limited {
				continue
			}
			// Against the baseline with the same snapshot state, else the
			// one with nothing held.
			baseline := func(hold bool) (done, bool) {
				for _, d := range runs {
					if d.r.baseline && d.r.hold == hold {
						return d, true
					}
				}
				return done{}, false
			}
			for _, d := range runs {
				if d.r.baseline {
					continue
				}
				b, ok := baseline(d.r.hold)
				if !ok {
					if b, ok = baseline(false); !ok {
						continue
					}
				}
				ratio := d.rate / b.rate
				verdict := "met"
				if ratio < fairAimShare {
					verdict = "MISSED"
				}
				pr.rep.Rows[d.row].Notes += fmt.Sprintf("; %.2f× the FIFO baseline's %.0f msg/s (%s): aim ≥ %.2f×, %s", ratio, b.rate, b.r.name(), fairAimShare, verdict)
			}
		}
		return nil
	})
}

// fairB is one of B's rows: which kind, and when its transaction
// committed.
type fairB struct {
	id        string
	reset     bool
	committed time.Time
}

// fairEnqueue commits B's k-th reset or invoice in a transaction of its
// own and returns the row id the sink will see.
type fairEnqueue func(ctx context.Context, k int, reset bool) (string, error)

func fairResetURL(k int) string {
	return "https://app.example.com/reset/" + strconv.Itoa(k) + "?token=3f9a1c7e5b2d4f60"
}

// fairEnqueuer is B's enqueue on p: outbox.Enqueue with the kind's own
// priority for postbox (and the baseline, which reads the same rows), a
// River InsertTx at the priority a user would give it for the peer.
func (pr *poolRunner) fairEnqueuer(p path, app *pgxpool.Pool) (fairEnqueue, error) {
	if p.peer != nil {
		client, err := peerInserter(app, p.peer.cooldown)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, k int, reset bool) (string, error) {
			args, opts := peerArgs{To: "b" + strconv.Itoa(k) + "@example.com", Subject: subject, Text: pr.body}, &river.InsertOpts{Priority: 2}
			if reset {
				args, opts = peerArgs{To: args.To, Subject: "Reset your password", Text: "Reset your password: " + fairResetURL(k)}, &river.InsertOpts{Priority: 1}
			}
			var id string
			err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
				res, err := client.InsertTx(ctx, tx, args, opts)
				if err != nil {
					return err
				}
				id = peerRowID(res.Job.ID)
				return nil
			})
			return id, err
		}, nil
	}
	return func(ctx context.Context, k int, reset bool) (string, error) {
		to := "b" + strconv.Itoa(k) + "@example.com"
		e := outbox.Email{Kind: outbox.KindInvoice, CustomerID: fairCustomerB,
			Payload: outbox.Payload{To: to, Subject: subject, InvoiceNumber: "INV-B-" + strconv.Itoa(k), AmountDue: "€120.00", DueDate: "1 March 2027"}}
		if reset {
			e = outbox.Email{Kind: outbox.KindPasswordReset, CustomerID: fairCustomerB,
				Payload: outbox.Payload{To: to, Subject: "Reset your password", PasswordResetURL: fairResetURL(k)}}
		}
		var id string
		err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			var err error
			id, err = outbox.Enqueue(ctx, tx, e)
			return err
		})
		return id, err
	}, nil
}

// fairFloodSQL is A's invoices by plain SQL, as a billing run writes them:
// no priority named, so the kind's (5) by the insert trigger.
const fairFloodSQL = `INSERT INTO email_outbox (kind, customer_id, payload)
SELECT 'invoice', $1::text, jsonb_build_object('to', 'a' || i || '@example.com', 'subject', $2::text,
	'invoice_number', 'INV-A-' || i, 'amount_due', '€120.00', 'due_date', '1 March 2027')
FROM generate_series($3::int, $4::int) AS i RETURNING id::text`

// fairFlood is A's FairRows invoices in transactions of fairChunk rows:
// email_outbox rows for postbox, River jobs of priority 2 for the peer.
// It returns the row ids the sink will see.
func (pr *poolRunner) fairFlood(ctx context.Context, p path) ([]string, error) {
	n := pr.po.FairRows
	ids := make([]string, 0, n)
	if p.peer == nil {
		for lo := 0; lo < n; lo += fairChunk {
			rows, err := pr.ctl.Query(ctx, fairFloodSQL, fairCustomerA, subject, lo, min(lo+fairChunk, n)-1)
			if err != nil {
				return nil, err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return nil, err
			}
			ids = append(ids, got...)
		}
		return ids, nil
	}
	client, err := peerInserter(pr.ctl, p.peer.cooldown)
	if err != nil {
		return nil, err
	}
	for lo := 0; lo < n; lo += fairChunk {
		params := make([]river.InsertManyParams, 0, fairChunk)
		for i := lo; i < min(lo+fairChunk, n); i++ {
			params = append(params, river.InsertManyParams{Args: peerArgs{To: "a" + strconv.Itoa(i) + "@example.com", Subject: subject, Text: pr.body},
				InsertOpts: &river.InsertOpts{Priority: 2}})
		}
		res, err := client.InsertMany(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			ids = append(ids, peerRowID(r.Job.ID))
		}
	}
	return ids, nil
}

// fairTrickle is B's load: at each whole second of FairLoad from its
// start, a reset and then an invoice, each committed on its own; a row's
// commit time is taken when its commit returned. It returns B's rows, the
// load's start and the machine's busy time over exactly FairLoad from it.
func (pr *poolRunner) fairTrickle(ctx context.Context, enq fairEnqueue) ([]fairB, time.Time, time.Duration, error) {
	secs := int(pr.po.FairLoad / time.Second)
	bs := make([]fairB, 0, 2*secs)
	start, busy := time.Now(), machineBusy()
	for k := range secs {
		if err := sleepCtx(ctx, time.Until(start.Add(time.Duration(k)*time.Second))); err != nil {
			return nil, start, 0, err
		}
		for _, reset := range []bool{true, false} {
			id, err := enq(ctx, k, reset)
			if err != nil {
				return nil, start, 0, fmt.Errorf("pool fair: customer B's enqueue %d: %w", k, err)
			}
			bs = append(bs, fairB{id: id, reset: reset, committed: time.Now()})
		}
	}
	if err := sleepCtx(ctx, time.Until(start.Add(pr.po.FairLoad))); err != nil {
		return nil, start, 0, err
	}
	return bs, start, machineBusy() - busy, nil
}

// fairRunOnce runs case c on r: one process up and idle, A's flood, B's
// load fairGap after A's last commit, then B's rows awaited up to
// FairWait. It reports B's resets and invoices commit → DATA (lower
// bounds for any still missing at the bound), and A's rate (case 1) or
// all rows' (case 2) at the relay over B's load, which it returns.
func (pr *poolRunner) fairRunOnce(ctx context.Context, c fairCase, r fairRun) (float64, error) {
	label := c.label + ": " + r.name()
	if err := pr.truncate(ctx); err != nil {
		return 0, err
	}
	// A checkpoint, so no run pays for the last one's dirty pages.
	if err := pr.settle(ctx, pr.ctl); err != nil {
		return 0, err
	}
	rs := &relaySet{gauge: new(smtpsink.Gauge)}
	defer rs.close()
	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true, DataDelay: c.delay, Gauge: rs.gauge})
	if err != nil {
		return 0, err
	}
	rs.sinks = append(rs.sinks, sink)
	app, err := pr.pool(ctx, 2)
	if err != nil {
		return 0, err
	}
	defer app.Close()
	enq, err := pr.fairEnqueuer(r.p, app)
	if err != nil {
		return 0, err
	}
	procs, _, err := pr.start(ctx, r.p, rs, 1, "fair "+label)
	if err != nil {
		return 0, fmt.Errorf("pool fair %s: %w", label, err)
	}
	defer pr.stop(procs)
	release, err := r.snapshot(ctx, pr.url)
	if err != nil {
		return 0, err
	}
	defer release()

	pr.logf("pool fair: %s: A enqueues %d invoices", label, pr.po.FairRows)
	aIDs, err := pr.fairFlood(ctx, r.p)
	if err != nil {
		return 0, fmt.Errorf("pool fair %s: A's flood: %w", label, err)
	}
	flooded := time.Now()
	if err := sleepCtx(ctx, time.Until(flooded.Add(fairGap))); err != nil {
		return 0, err
	}
	pr.logf("pool fair: %s: B enqueues a reset and an invoice every second for %s (A's %d committed %.1f s ago, %d at the relay)",
		label, pr.po.FairLoad, len(aIDs), time.Since(flooded).Seconds(), rs.total())
	bs, loadStart, busy, err := pr.fairTrickle(ctx, enq)
	if err != nil {
		return 0, fmt.Errorf("pool fair %s: %w", label, err)
	}
	bIDs := make([]string, len(bs))
	for i, b := range bs {
		bIDs[i] = b.id
	}
	if err := anyExited("pool fair: "+label, procs); err != nil {
		return 0, err
	}
	_, _, err = pr.waitAll(ctx, rs, bIDs, pr.po.FairWait, "pool fair: "+label+", B's rows", procs)
	if err != nil {
		return 0, err
	}
	waited := time.Now()
	time.Sleep(500 * time.Millisecond) // a duplicate sent just after the last first arrival still counts
	t := rs.tally(slices.Concat(aIDs, bIDs))
	if t.dups != 0 {
		return 0, checkf("pool fair %s: %d duplicates", label, t.dups)
	}
	dead := deadTuples(ctx, pr.ctl, r.p, "email_outbox")

	// B's latencies; a row not yet there counts as the time it had waited
	// at the bound, so the figures are lower bounds.
	var resets, invoices []time.Duration
	missing := map[bool]int{}
	for _, b := range bs {
		lat := waited.Sub(b.committed)
		if ds := t.byID[b.id]; len(ds) > 0 {
			lat = first(ds).at.Sub(b.committed)
		} else {
			missing[b.reset]++
		}
		if b.reset {
			resets = append(resets, lat)
		} else {
			invoices = append(invoices, lat)
		}
	}
	loadEnd := loadStart.Add(pr.po.FairLoad)
	inWindow := func(ids []string) int {
		n := 0
		for _, id := range ids {
			if ds := t.byID[id]; len(ds) > 0 {
				if at := first(ds).at; !at.Before(loadStart) && at.Before(loadEnd) {
					n++
				}
			}
		}
		return n
	}
	aIn, bIn := inWindow(aIDs), inWindow(bIDs)
	aRate, allRate := perSecond(aIn, pr.po.FairLoad), perSecond(aIn+bIn, pr.po.FairLoad)
	cpu := fmtCPU(busy, aIn+bIn)
	notes := pr.fairNotes(c, r)

	for _, k := range []struct {
		what  string
		reset bool
		lat   []time.Duration
		aim   time.Duration
	}{{"B's password resets", true, resets, c.aimReset}, {"B's invoices", false, invoices, c.aimInvoice}} {
		ps := percentiles(k.lat, 50, 99, 100)
		figure := fmtMs(ps[0]) + " / " + fmtMs(ps[1]) + " / " + fmtMs(ps[2])
		arrived := fmt.Sprintf("all %d arrived", len(k.lat))
		if m := missing[k.reset]; m > 0 {
			figure = "≥ " + figure
			arrived = fmt.Sprintf("%d of %d had NOT arrived %s after B's load: the figures are lower bounds", m, len(k.lat), pr.po.FairWait)
		}
		verdict := "met"
		if ps[1] > k.aim {
			verdict = "MISSED"
		}
		pr.add(Row{Section: titlePoolFair, Path: label + ": " + k.what, Figure: figure, Unit: "ms p50/p99/max commit→DATA", Value: float64(ps[1]) / float64(time.Millisecond),
			Notes: fmt.Sprintf("aim p99 ≤ %s: %s; %s; one a second for %s, each committed on its own, %s after A's %s invoices committed; %s",
				k.aim, verdict, arrived, pr.po.FairLoad, fairGap, fmtCount(pr.po.FairRows), notes)})
	}
	if c.limited {
		aim := fairAimShare * fairRate
		verdict := "met"
		if aRate < aim {
			verdict = "MISSED"
		}
		pr.add(Row{Section: titlePoolFair, Path: label + ": A's rate during B's load", Figure: fmt.Sprintf("%.1f", aRate), Unit: "msg/s at the relay", Value: aRate,
			Notes: fmt.Sprintf("%d of A's rows accepted in B's %s (and %d of B's: %.1f msg/s in all); aim ≥ %.1f msg/s (%.2f × %d): %s; machine CPU %s per message over the window; 0 duplicates; %s",
				aIn, pr.po.FairLoad, bIn, allRate, aim, fairAimShare, fairRate, verdict, cpu, dead)})
		return aRate, nil
	}
	pr.add(Row{Section: titlePoolFair, Path: label + ": throughput during B's load", Figure: fmtRate(allRate), Unit: "msg/s at the relay", Value: allRate,
		Notes: fmt.Sprintf("%d rows accepted in B's %s (A's %d, B's %d); the relay's limit %.0f msg/s (%d conns ÷ %s); machine CPU %s per message over the window; 0 duplicates; %s",
			aIn+bIn, pr.po.FairLoad, aIn, bIn, float64(fairConc)/c.delay.Seconds(), fairConc, c.delay, cpu, dead)})
	return allRate, nil
}

// fairSummary is the labels of the section's runs, for the progress log.
func fairSummary(runs []fairRun) string {
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.name()
	}
	return strings.Join(names, "; ")
}
