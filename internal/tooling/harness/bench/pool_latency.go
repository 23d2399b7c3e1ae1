package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/outbox"
)

// latencyVariant is one way of offering the steady load.
type latencyVariant struct {
	name    string
	p       path
	enqueue bool // postbox: outbox.Enqueue (no Kick) instead of a plain INSERT
}

var latencyVariants = []latencyVariant{
	{name: "postbox, plain SQL INSERT", p: pathPostbox},
	{name: "postbox, outbox.Enqueue (no Kick)", p: pathPostbox, enqueue: true},
	{name: "River peer, defaults, InsertTx", p: pathPeerDefaults},
	{name: "River peer, tuned, InsertTx", p: pathPeerTuned},
}

// latencySection runs every variant at every rate with the processes up
// and idle first, and reports commit → DATA accepted.
func (pr *poolRunner) latencySection(ctx context.Context) error {
	return pr.trials(ctx, pr.po.Replicas, func(ctx context.Context, t, rc int) error {
		for _, rate := range pr.po.Rates {
			for _, v := range rotate(latencyVariants, t) {
				if err := pr.latencyRun(ctx, v, rc, rate); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// insertSQL is the plain-SQL enqueue of the latency and leader-kill loads.
const insertSQL = `INSERT INTO email_outbox (kind, customer_id, payload)
VALUES ('raw', 'cus_bench', jsonb_build_object('to', $1::text, 'subject', $2::text, 'text', $3::text)) RETURNING id::text`

// plainInsert enqueues message i by plain SQL, in its own transaction.
func (pr *poolRunner) plainInsert(ctx context.Context, db *pgxpool.Pool, i int) (string, error) {
	var id string
	err := db.QueryRow(ctx, insertSQL, recipientOf(i), subject, pr.body).Scan(&id)
	return id, err
}

// load is the function a generator calls for message i: it commits one
// message in its own transaction and returns the row id the sink will see.
type load func(ctx context.Context, i int) (string, error)

// loadFor is the variant's load on the application pool app.
func (pr *poolRunner) loadFor(v latencyVariant, app *pgxpool.Pool) (load, error) {
	switch {
	case v.p.peer != nil:
		client, err := peerInserter(app, v.p.peer.cooldown)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, i int) (string, error) {
			var id string
			err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
				res, err := client.InsertTx(ctx, tx, peerArgs{To: recipientOf(i), Subject: subject, Text: pr.body}, nil)
				if err != nil {
					return err
				}
				id = peerRowID(res.Job.ID)
				return nil
			})
			return id, err
		}, nil
	case v.enqueue:
		var enq outbox.Enqueuer
		return func(ctx context.Context, i int) (string, error) {
			var id string
			err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
				var err error
				id, err = enq.Enqueue(ctx, tx, pr.message(i))
				return err
			})
			return id, err
		}, nil
	default:
		return func(ctx context.Context, i int) (string, error) { return pr.plainInsert(ctx, app, i) }, nil
	}
}

// warmUp sends one message through the running processes and waits for
// it, so a timed phase starts with a leader elected and the pipeline
// working.
func (pr *poolRunner) warmUp(ctx context.Context, fn load, rs *relaySet, procs []*proc, label string) error {
	id, err := fn(ctx, -1)
	if err != nil {
		return fmt.Errorf("%s: warm-up: %w", label, err)
	}
	_, ok, err := pr.waitAll(ctx, rs, []string{id}, 60*time.Second, label+" warm-up", procs)
	if err != nil {
		return err
	}
	if !ok {
		return checkf("%s: the warm-up message did not arrive within 60 s", label)
	}
	time.Sleep(500 * time.Millisecond)
	return nil
}

func (pr *poolRunner) latencyRun(ctx context.Context, v latencyVariant, rc, rate int) error {
	label := fmt.Sprintf("%s%d msg/s, %s", rp(rc), rate, v.name)
	st, err := pr.steadyRun(ctx, v, rc, rate, pr.po.Duration, "pool latency: "+label)
	if err != nil {
		return err
	}
	ps := percentiles(st.lat, 50, 95, 99, 100)
	shares, _ := fmtShares(st.perSink)
	pr.add(Row{Section: titlePoolLatency, Path: label,
		Figure: fmtMs(ps[0]) + " / " + fmtMs(ps[1]) + " / " + fmtMs(ps[2]), Unit: "ms p50/p95/p99", Value: float64(ps[2]) / float64(time.Millisecond),
		Notes: fmt.Sprintf("includes the relay's %s per message; max %s ms; %d committed over %s (achieved %.0f/s; the relay's limit is %.0f msg/s), %d received, 0 duplicates, 0 lost; per replica %s; %s",
			pr.po.RelayDelay, fmtMs(ps[3]), len(st.lat), pr.po.Duration, st.achieved, pr.po.relayLimit(rc), len(st.lat), shares, v.p.notes(pr.po))})
	return nil
}

// steady is what one steady load measured: each message's commit →
// DATA accepted, and what the machine and the database did meanwhile.
type steady struct {
	lat      []time.Duration
	achieved float64
	perSink  []int
	split    cpuSplit // the machine's busy time, from the load's start to the last arrival, by who spent it
	elapsed  time.Duration
	stmts    statements // the database's work over the same span
}

// steadyRun offers rate msg/s for d through variant v on rc fresh
// processes, idle and warmed up first, and waits for every message: one
// missing or sent twice fails the run.
func (pr *poolRunner) steadyRun(ctx context.Context, v latencyVariant, rc, rate int, d time.Duration, label string) (steady, error) {
	w, err := pr.startWarm(ctx, v, rc, label)
	if err != nil {
		return steady{}, err
	}
	defer w.close(pr)
	fn, rs, procs := w.fn, w.rs, w.procs

	total := max(1, int(float64(rate)*d.Seconds()))
	pr.logf("%s for %s", label, d)
	began, stmts, split := time.Now(), pr.statements(ctx), splitFrom(ctx, pr.ctl, procs)
	commits, achieved, err := openLoop(ctx, rate, total, appConns, fn)
	if err != nil {
		return steady{}, fmt.Errorf("%s: %w", label, err)
	}
	ids := make([]string, 0, len(commits))
	for id := range commits {
		ids = append(ids, id)
	}
	t, all, err := pr.waitAll(ctx, rs, ids, 60*time.Second, label, procs)
	if err != nil {
		return steady{}, err
	}
	st := steady{achieved: achieved, perSink: t.perSink, split: split(), elapsed: time.Since(began)}
	st.stmts = pr.statements(ctx).since(stmts)
	if !all {
		return steady{}, checkf("%s: %d of %d messages arrived within 60 s after the load ended", label, t.received, total)
	}
	if t.dups != 0 {
		return steady{}, checkf("%s: %d duplicates among %d messages", label, t.dups, total)
	}
	st.lat = make([]time.Duration, 0, total)
	for id, c := range commits {
		st.lat = append(st.lat, first(t.byID[id]).at.Sub(c))
	}
	return st, nil
}

// warm is a phase's processes up, idle and warmed up, and its load on a
// pool of its own.
type warm struct {
	app   *pgxpool.Pool
	fn    load
	rs    *relaySet
	procs []*proc
}

// startWarm truncates the tables and starts rc processes of v's path, each
// with its relay, warmed up by one message of v's load.
func (pr *poolRunner) startWarm(ctx context.Context, v latencyVariant, rc int, label string) (*warm, error) {
	if err := pr.truncate(ctx); err != nil {
		return nil, err
	}
	w := &warm{}
	var err error
	if w.app, err = pr.pool(ctx, appConns); err != nil {
		return nil, err
	}
	if w.fn, err = pr.loadFor(v, w.app); err == nil {
		w.rs, err = pr.relays(rc)
	}
	if err != nil {
		w.app.Close()
		return nil, err
	}
	if w.procs, _, err = pr.start(ctx, v.p, w.rs, rc, label); err != nil {
		w.rs.close()
		w.app.Close()
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	if err := pr.warmUp(ctx, w.fn, w.rs, w.procs, label); err != nil {
		w.close(pr)
		return nil, err
	}
	return w, nil
}

func (w *warm) close(pr *poolRunner) {
	pr.stop(w.procs)
	w.rs.close()
	w.app.Close()
}

// openLoop offers total loads at rate a second, open-loop: the i-th is due
// at start + i/rate whether or not earlier ones committed (up to workers
// in flight). It returns each row's commit time (when its load returned)
// by row id and the rate achieved.
func openLoop(ctx context.Context, rate, total, workers int, fn load) (map[string]time.Time, float64, error) {
	type commit struct {
		id string
		at time.Time
	}
	due := make(chan int, total)
	out := make([]commit, total)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		genErr  error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Go(func() {
			for i := range due {
				id, err := fn(ctx, i)
				if err != nil {
					errOnce.Do(func() { genErr = err; cancel() })
					return
				}
				out[i] = commit{id, time.Now()}
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := range total {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		due <- i
	}
	close(due)
	wg.Wait()
	if genErr != nil {
		return nil, 0, genErr
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	commits := make(map[string]time.Time, total)
	var last time.Time
	for _, c := range out {
		commits[c.id] = c.at
		if c.at.After(last) {
			last = c.at
		}
	}
	span := max(last.Sub(start), time.Duration(total-1)*interval)
	return commits, perSecond(total-1, span), nil
}
