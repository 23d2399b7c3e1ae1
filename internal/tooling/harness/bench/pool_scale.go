package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/migrations"
)

// The scale section runs postbox on the database users have rather than
// an empty one: months of sent mail kept (ScaleRows sent rows and their
// attempts) and a REPEATABLE READ snapshot held open for a whole run, as
// a report, pg_dump or a session idle in transaction holds one. Beside it,
// on the same held snapshot and load, the River peer with River's
// defaults, whose river_job has the same exposure.

// scalePeerWorkers is the River peer's MaxWorkers here unless set.
const scalePeerWorkers = 100

// scaleCase is one steady-load run of the scale section.
type scaleCase struct {
	p      path
	seeded bool // on the database holding ScaleRows sent rows
	hold   bool // a REPEATABLE READ snapshot open for the whole run
}

func (c scaleCase) label(po PoolOptions) string {
	db := "empty database"
	if c.seeded {
		db = fmt.Sprintf("%s sent rows", fmtCount(po.ScaleRows))
	}
	held := "nothing held"
	if c.hold {
		held = "snapshot held"
	}
	return fmt.Sprintf("%s, %s: %s", db, held, c.p.name)
}

// scaleSection runs the steady load on the empty database (postbox and
// the peer, each without and with a held snapshot), drains a backlog
// there, then does the same for postbox on a copy of the seeded database.
func (pr *poolRunner) scaleSection(ctx context.Context) error {
	if pr.po.PeerWorkers == 0 {
		// River's own examples run a queue at MaxWorkers 100; at
		// EMAIL_CONCURRENCY's 16 River's defaults fetch 160 jobs/s at most
		// (16 per 100 ms cooldown) and the peer could not keep up with the
		// steady load at all, which is not what this section measures.
		pr.po.PeerWorkers = scalePeerWorkers
		defer func() { pr.po.PeerWorkers = 0 }()
	}
	var empty, seeded []scaleCase
	for _, hold := range []bool{false, true} {
		empty = append(empty, scaleCase{p: pathPostbox, hold: hold}, scaleCase{p: pathPeerDefaults, hold: hold})
		seeded = append(seeded, scaleCase{p: pathPostbox, seeded: true, hold: hold})
	}
	drains := map[bool][]float64{}
	p99 := map[bool][]float64{} // postbox, nothing held
	err := pr.trials(ctx, []int{1}, func(ctx context.Context, t, _ int) error {
		for _, c := range rotate(empty, t) {
			v, err := pr.scaleRun(ctx, c)
			if err != nil {
				return err
			}
			if c.p.peer == nil && !c.hold {
				p99[false] = append(p99[false], v)
			}
		}
		for _, p := range []path{pathPostbox, pathPeerDefaults} {
			if err := pr.truncate(ctx); err != nil {
				return err
			}
			rate, err := pr.scaleDrain(ctx, p, false)
			if err != nil {
				return err
			}
			if p.peer == nil {
				drains[false] = append(drains[false], rate)
			}
		}
		return pr.onSeeded(ctx, pr.emailSeed(), func(ctx context.Context) error {
			for _, c := range rotate(seeded, t) {
				v, err := pr.scaleRun(ctx, c)
				if err != nil {
					return err
				}
				if !c.hold {
					p99[true] = append(p99[true], v)
				}
			}
			rate, err := pr.scaleDrain(ctx, pathPostbox, true)
			drains[true] = append(drains[true], rate)
			return err
		})
	})
	if err != nil {
		return err
	}
	rows := fmtCount(pr.po.ScaleRows)
	if e, s := median(drains[false]), median(drains[true]); e > 0 {
		pr.add(Row{Section: titlePoolScale, Path: "ratio: backlog drain, " + rows + " sent rows / empty database", Figure: fmt.Sprintf("%.2f", s/e), Unit: "×", Value: s / e,
			Notes: "postbox worker run, medians; the aim is ≥ 0.9×"})
	}
	if e, s := median(p99[false]), median(p99[true]); e > 0 {
		pr.add(Row{Section: titlePoolScale, Path: "ratio: p99 at " + strconv.Itoa(pr.po.ScaleRate) + " msg/s, " + rows + " sent rows / empty database", Figure: fmt.Sprintf("%.2f", s/e), Unit: "×", Value: s / e,
			Notes: "postbox worker run, nothing held, medians; the aim is ≤ 1.25×"})
	}
	return nil
}

// seedKind is one kept history a scale section runs on: its template's
// name prefix, how many rows, what they are, and what fills a migrated
// database with them.
type seedKind struct {
	prefix string
	rows   int
	what   string
	fill   func(ctx context.Context, url string) (time.Duration, error)
}

// emailSeed is the pool-scale section's history: ScaleRows sent rows and
// their attempts.
func (pr *poolRunner) emailSeed() seedKind {
	return seedKind{prefix: "postbox_scale_seed", rows: pr.po.ScaleRows, what: "sent rows and their attempts",
		fill: func(ctx context.Context, url string) (time.Duration, error) {
			return seedHistory(ctx, url, pr.po.ScaleRows, pr.body, pr.logf)
		}}
}

// onSeeded runs fn with the runner pointed at a fresh copy of k's seeded
// database, made from its template (seeded first if there is none), and
// dropped afterwards.
func (pr *poolRunner) onSeeded(ctx context.Context, k seedKind, fn func(context.Context) error) error {
	tmpl, err := pr.seedTemplate(ctx, k)
	if err != nil {
		return err
	}
	name := "postbox_bench_scale_" + randomHex(4)
	pr.logf("pool scale: copying %s into %s", tmpl, name)
	copied := time.Now()
	url, err := pgserver.CreateDatabase(ctx, pr.adminURL(), name, tmpl)
	if err != nil {
		return err
	}
	pr.logf("pool scale: copied in %s", time.Since(copied).Round(time.Second))
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := pgserver.DropDatabase(dctx, pr.adminURL(), name); err != nil {
			pr.logf("pool scale: drop %s: %v", name, err)
		}
	}()
	ctl, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer ctl.Close()
	saved, savedCtl := pr.url, pr.ctl
	pr.url, pr.ctl = url, ctl
	defer func() { pr.url, pr.ctl = saved, savedCtl }()
	return fn(ctx)
}

// adminURL is the scratch database's server, for creating and dropping
// databases beside it.
func (pr *poolRunner) adminURL() string {
	u, err := pgserver.WithDatabase(pr.base, "postgres")
	if err != nil {
		return pr.base
	}
	return u
}

// seedTemplate returns the name of a database holding k's rows at the
// current migration, seeding it first when there is none. It is kept for
// the next run with KeepSeed (seeding 10 M rows takes minutes), else
// dropped when the run ends.
func (pr *poolRunner) seedTemplate(ctx context.Context, k seedKind) (string, error) {
	if name, ok := pr.seeds[k.prefix]; ok {
		return name, nil
	}
	schema, err := schemaHash()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s_%d_%s", k.prefix, k.rows, schema)
	var exists bool
	if err := pr.ctl.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		// The note is written once the seed is complete: a seed without
		// one is another run's, still being filled (or one that failed),
		// and this run seeds its own beside it.
		var note string
		_ = pr.ctl.QueryRow(ctx, `SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = $1`, name).Scan(&note)
		if note != "" {
			pr.logf("pool scale: reusing %s (%s)", name, note)
			pr.seeds[k.prefix] = name
			return name, nil
		}
		name += "_" + randomHex(4)
		pr.logf("pool scale: a seed of the same name is unfinished; seeding %s", name)
	}
	url, err := pgserver.CreateDatabase(ctx, pr.adminURL(), name, "")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			_ = pgserver.DropDatabase(context.WithoutCancel(ctx), pr.adminURL(), name)
		}
	}()
	if err := migrate(ctx, url); err != nil {
		return "", err
	}
	took, err := k.fill(ctx, url)
	if err != nil {
		return "", err
	}
	size, _ := databaseSize(ctx, url)
	note := fmt.Sprintf("%s %s seeded in %s; %s on disk", fmtCount(k.rows), k.what, took.Round(time.Second), size)
	if _, err := pr.ctl.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS "+quoteLiteral(note)); err != nil {
		return "", err
	}
	pr.logf("pool scale: %s", note)
	ok = true
	pr.seeds[k.prefix] = name
	if !pr.po.KeepSeed {
		pr.cleanups = append(pr.cleanups, func() {
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = pgserver.DropDatabase(dctx, pr.adminURL(), name)
		})
	}
	return name, nil
}

// schemaHash names the migrations a seeded database was made with: a seed
// made before a migration changed is not reused.
func schemaHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.SQL, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.SQL, path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	return hex.EncodeToString(h.Sum(nil))[:10], err
}

func databaseSize(ctx context.Context, url string) (string, error) {
	conn, err := pgserver.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s string
	err = conn.QueryRow(ctx, `SELECT pg_size_pretty(pg_database_size(current_database()))`).Scan(&s)
	return s, err
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// scaleInsertSQL is the scale section's plain-SQL enqueue: a random one of
// the seeded customers and an invoice, so each insert lands where an
// application's would in every index, not at one hot spot.
const scaleInsertSQL = `INSERT INTO email_outbox (kind, customer_id, invoice_id, payload)
VALUES ('raw', $1, $2, jsonb_build_object('to', $3::text, 'subject', $4::text, 'text', $5::text)) RETURNING id::text`

func (pr *poolRunner) scaleLoad(app *pgxpool.Pool) load {
	return func(ctx context.Context, i int) (string, error) {
		var id string
		err := app.QueryRow(ctx, scaleInsertSQL, "cus_"+strconv.Itoa(rand.IntN(seedCustomers)), "in_live_"+randomHex(6),
			recipientOf(i), subject, pr.body).Scan(&id)
		return id, err
	}
}

// scaleRun offers ScaleRate msg/s for ScaleDuration to one process of
// c's path and reports commit → DATA accepted: the whole run's p50 and
// p99 and the p99 of its first and last fifths (by commit time), which is
// where a cost growing with dead tuples shows. It returns the p99 in ms.
func (pr *poolRunner) scaleRun(ctx context.Context, c scaleCase) (float64, error) {
	label := c.label(pr.po)
	if !c.seeded {
		if err := pr.truncate(ctx); err != nil {
			return 0, err
		}
	}
	app, err := pr.pool(ctx, appConns)
	if err != nil {
		return 0, err
	}
	defer app.Close()
	fn := pr.scaleLoad(app)
	if c.p.peer != nil {
		if fn, err = pr.loadFor(latencyVariant{p: c.p}, app); err != nil {
			return 0, err
		}
	}
	rs, err := pr.relays(1)
	if err != nil {
		return 0, err
	}
	defer rs.close()
	procs, _, err := pr.start(ctx, c.p, rs, 1, "scale "+label)
	if err != nil {
		return 0, fmt.Errorf("pool scale %s: %w", label, err)
	}
	defer pr.stop(procs)
	if err := pr.warmUp(ctx, fn, rs, procs, "pool scale: "+label); err != nil {
		return 0, err
	}
	pr.logf("pool scale: %s, %d msg/s for %s", label, pr.po.ScaleRate, pr.po.ScaleDuration)
	commits, achieved, busy, release, err := pr.offerScale(ctx, c.hold, appConns, fn)
	if err != nil {
		return 0, fmt.Errorf("pool scale %s: %w", label, err)
	}
	defer release()
	total := len(commits)
	ids := make([]string, 0, len(commits))
	for id := range commits {
		ids = append(ids, id)
	}
	t, all, err := pr.waitAll(ctx, rs, ids, 2*time.Minute, "pool scale: "+label, procs)
	if err != nil {
		return 0, err
	}
	cpu := machineBusy() - busy
	if !all {
		return 0, checkf("pool scale %s: %d of %d messages arrived within 2 min after the load ended; %s", label, t.received, total,
			pr.describeMissing(ctx, c.p, ids, t))
	}
	if t.dups != 0 {
		return 0, checkf("pool scale %s: %d duplicates among %d messages", label, t.dups, total)
	}
	arrived := make(map[string]time.Time, len(commits))
	for id := range commits {
		arrived[id] = first(t.byID[id]).at
	}
	whole, head, tail := byFifths(commits, arrived)
	dead := deadTuples(ctx, pr.ctl, c.p, "email_outbox")
	pr.add(Row{Section: titlePoolScale, Path: label,
		Figure: fmtMs(whole[0]) + " / " + fmtMs(whole[1]) + " / " + fmtMs(head) + " / " + fmtMs(tail), Unit: "ms p50/p99/p99 first fifth/p99 last fifth",
		Value: float64(whole[1]) / float64(time.Millisecond),
		Notes: fmt.Sprintf("commit → DATA accepted, relay delay %s; last fifth %.1f× the first; max %s ms; %d committed by plain SQL over %s (achieved %.0f/s), %d received, 0 duplicates, 0 lost; machine CPU %s per message; %s; %s",
			pr.po.RelayDelay, float64(tail)/float64(max(head, 1)), fmtMs(whole[2]), total, pr.po.ScaleDuration, achieved, t.received,
			fmtCPU(cpu, total), dead, c.p.notes(pr.po))})
	return float64(whole[1]) / float64(time.Millisecond), nil
}

// offerScale holds a snapshot open when hold says so, then offers
// ScaleRate for ScaleDuration through fn from workers goroutines. It
// returns the commits, the rate achieved, the machine's busy time at the
// start, and what ends the held snapshot (once the run is counted).
func (pr *poolRunner) offerScale(ctx context.Context, hold bool, workers int, fn load) (commits map[string]time.Time, achieved float64, busy time.Duration, release func(), err error) {
	release = func() {}
	if hold {
		if release, err = holdSnapshot(ctx, pr.url); err != nil {
			return nil, 0, 0, nil, err
		}
	}
	total := max(1, int(float64(pr.po.ScaleRate)*pr.po.ScaleDuration.Seconds()))
	busy = machineBusy()
	commits, achieved, err = openLoop(ctx, pr.po.ScaleRate, total, workers, fn)
	if err != nil {
		release()
		return nil, 0, 0, nil, err
	}
	return commits, achieved, busy, release, nil
}

// byFifths is commit → arrival over a steady run: p50, p99 and the most
// of the whole run, and the p99 of its first and last fifths by commit
// time, which is where a cost growing with dead tuples shows. Every
// committed id must have arrived.
func byFifths(commits, arrived map[string]time.Time) (whole []time.Duration, head, tail time.Duration) {
	type sample struct {
		at  time.Time
		lat time.Duration
	}
	samples := make([]sample, 0, len(commits))
	for id, at := range commits {
		samples = append(samples, sample{at, arrived[id].Sub(at)})
	}
	slices.SortFunc(samples, func(a, b sample) int { return a.at.Compare(b.at) })
	lats := func(s []sample) []time.Duration {
		out := make([]time.Duration, len(s))
		for i, x := range s {
			out[i] = x.lat
		}
		return out
	}
	fifth := max(len(samples)/5, 1)
	whole = percentiles(lats(samples), 50, 99, 100)
	head = percentiles(lats(samples[:fifth]), 99)[0]
	tail = percentiles(lats(samples[len(samples)-fifth:]), 99)[0]
	return whole, head, tail
}

// scaleDrain inserts ScaleBacklog rows before the process starts and
// times one process until all arrived. The table's statistics are left
// as they were (a backlog arrives between two ANALYZEs), with a CHECKPOINT
// first, so no run pays for the last one's dirty pages.
func (pr *poolRunner) scaleDrain(ctx context.Context, p path, seeded bool) (float64, error) {
	label := "backlog drain " + fmtCount(pr.po.ScaleBacklog) + ", " + scaleCase{p: p, seeded: seeded}.label(pr.po)
	n := pr.po.ScaleBacklog
	pr.logf("pool scale: %s: inserting %d", label, n)
	ids, _, err := pr.insertBacklog(ctx, p, n)
	if err != nil {
		return 0, fmt.Errorf("pool scale %s: %w", label, err)
	}
	if _, err := pr.ctl.Exec(ctx, "CHECKPOINT"); err != nil {
		pr.logf("pool scale: CHECKPOINT refused (%v)", err)
	}
	rs, err := pr.relays(1)
	if err != nil {
		return 0, err
	}
	defer rs.close()
	busy := machineBusy()
	procs, started, err := pr.start(ctx, p, rs, 1, "scale "+label)
	if err != nil {
		return 0, fmt.Errorf("pool scale %s: %w", label, err)
	}
	defer pr.stop(procs)
	t, all, err := pr.waitAll(ctx, rs, ids, backlogLimit, "pool scale: "+label, procs)
	if err != nil {
		return 0, err
	}
	cpu := machineBusy() - busy
	if !all {
		return 0, checkf("pool scale %s: %d of %d messages arrived within %s", label, t.received, n, backlogLimit)
	}
	if t.dups != 0 {
		return 0, checkf("pool scale %s: %d duplicates among %d messages", label, t.dups, n)
	}
	rate := perSecond(n, t.doneAt.Sub(started))
	pr.add(Row{Section: titlePoolScale, Path: label, Figure: fmtRate(rate), Unit: "msg/s from start", Value: rate,
		Notes: fmt.Sprintf("%d rows by plain SQL before the process started, statistics as they were; %.2f s from the exec; machine CPU %s per message; relay delay %s; %s",
			n, t.doneAt.Sub(started).Seconds(), fmtCPU(cpu, n), pr.po.RelayDelay, p.notes(pr.po))})
	return rate, nil
}

// holdSnapshot opens a REPEATABLE READ transaction on its own connection
// and takes its snapshot, as pg_dump or a long report does; release ends
// it. While it is open VACUUM can remove nothing newer, and index scans
// cannot mark entries dead.
func holdSnapshot(ctx context.Context, url string) (release func(), err error) {
	conn, err := pgserver.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	var xmin *string
	if err := tx.QueryRow(ctx, `SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&xmin); err != nil || xmin == nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("hold a snapshot: no backend_xmin (%v)", err)
	}
	return func() {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		conn.Close(context.WithoutCancel(ctx))
	}, nil
}

// deadTuples describes the dead tuples the path's queue tables hold after
// a run, which a held snapshot keeps VACUUM from removing: river_job for
// the River peer, postboxTables for postbox.
func deadTuples(ctx context.Context, db *pgxpool.Pool, p path, postboxTables ...string) string {
	tables := postboxTables
	if p.peer != nil {
		tables = []string{"river_job"}
	}
	described := make([]string, 0, len(tables))
	for _, table := range tables {
		var dead int64
		var size string
		err := db.QueryRow(ctx, `SELECT n_dead_tup, pg_size_pretty(pg_total_relation_size(relid)) FROM pg_stat_user_tables WHERE relname = $1`, table).Scan(&dead, &size)
		if err != nil {
			described = append(described, table+": "+err.Error())
			continue
		}
		described = append(described, fmt.Sprintf("%s after the run: %d dead tuples, %s with its indexes", table, dead, size))
	}
	return strings.Join(described, "; ")
}

func fmtCPU(cpu time.Duration, n int) string {
	if cpu <= 0 || n <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f ms", float64(cpu)/float64(time.Millisecond)/float64(n))
}

// fmtCount is 10000000 as "10 M", 200000 as "200 k".
func fmtCount(n int) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + " M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + " k"
	}
	return strconv.Itoa(n)
}

// describeMissing says where the first few undelivered rows stand, so a
// check that fails tells what to look at: status, attempts, due time
// against now, last error.
func (pr *poolRunner) describeMissing(ctx context.Context, p path, ids []string, t tally) string {
	var missing []string
	for _, id := range ids {
		if len(t.byID[id]) == 0 {
			missing = append(missing, id)
		}
	}
	if p.peer != nil || len(missing) == 0 {
		return fmt.Sprintf("missing %v", missing[:min(len(missing), 5)])
	}
	rows, err := pr.ctl.Query(ctx, `SELECT id::text, status, attempts, extract(epoch FROM next_attempt_at - now())::float8,
	extract(epoch FROM now() - created_at)::float8, coalesce(last_error, '')
FROM email_outbox WHERE id = ANY ($1::uuid[]) LIMIT 5`, missing)
	if err != nil {
		return "missing rows not read: " + err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, status, lastErr string
		var attempts int
		var due, created float64
		if err := rows.Scan(&id, &status, &attempts, &due, &created, &lastErr); err != nil {
			return "missing rows not read: " + err.Error()
		}
		out = append(out, fmt.Sprintf("%s %s, %d attempts, due in %.1f s, created %.1f s ago, last error %q", id, status, attempts, due, created, lastErr))
	}
	return "missing: " + strings.Join(out, "; ")
}
