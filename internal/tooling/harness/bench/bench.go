package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/migrations"
)

// Sections, in the order they run.
const (
	SectionEmail   = "email"
	SectionEnqueue = "enqueue"
	SectionLatency = "latency"
	SectionWebhook = "webhook"
	SectionCeiling = "ceiling"
)

// AllSections lists every section in run order.
var AllSections = []string{SectionEmail, SectionEnqueue, SectionLatency, SectionWebhook, SectionCeiling}

// Options configure a run. Zero fields take the Default preset's values.
type Options struct {
	N         int           // email rows per path (email and enqueue sections)
	Rates     []int         // offered loads of the latency section, msg/s
	Duration  time.Duration // length of each latency run
	Events    int           // webhook events
	Endpoints int           // webhook endpoints (one loopback receiver each)
	// LimitedRate, when set, adds one more webhook endpoint with this
	// rate limit (requests/s) beside the unlimited ones, to show it does
	// not hold them back.
	LimitedRate float64
	Sections    []string // nil: AllSections

	// PoolSize is the pgx pool's MaxConns, the same for every path.
	PoolSize int
	// Concurrency is the dispatcher's batches in flight in the email
	// drain, as EMAIL_CONCURRENCY sets it for a replica: one SMTP
	// connection each. 0 means DefaultConcurrency.
	Concurrency int
	// Clients is the goroutines that play the application (enqueue
	// transactions, the peer's InsertTx, webhook enqueues) and run the
	// ceiling's commits; 0 derives it from PoolSize (see DeriveClients).
	Clients int
	// PeerWorkers is the River peer's MaxWorkers.
	PeerWorkers int
	// BodyBytes is the size of every message's text body.
	BodyBytes int
	// Trials is how often the email section runs each path; the table
	// shows the median trial.
	Trials int
	// BatchSize, when set, overrides the dispatcher's leases.BatchSize as
	// EMAIL_BATCH_SIZE would, with EMAIL_BATCH_TIMEOUT raised to
	// BatchSize×PerRowBudget so the lease chain still holds. 0 runs the
	// shipped defaults (leases.Default).
	BatchSize int

	// Explain adds EXPLAIN (ANALYZE, BUFFERS) of the claim and the
	// dispatched mark on a table of 10,000 pending rows to the report.
	Explain bool

	// Progress receives one line per step; nil discards.
	Progress io.Writer

	explainRows int // the table size of the plans; 0 means 10,000 (tests shrink it)
}

// Default is the full run: a few minutes on a 2-core machine.
func Default() Options {
	return Options{
		N:           10_000,
		Rates:       []int{200, 1000},
		Duration:    10 * time.Second,
		Events:      1000,
		Endpoints:   10,
		PoolSize:    defaultPoolSize,
		PeerWorkers: 500,
		BodyBytes:   2048,
		Trials:      3,
	}
}

// Quick is the preset for CI or a curious user: under a minute.
func Quick() Options {
	o := Default()
	o.N = 1500
	o.Duration = 2 * time.Second
	o.Events = 100
	o.Trials = 1
	return o
}

const (
	defaultPoolSize = 32
	// DefaultConcurrency is the email drain's batches in flight: 200 SMTP
	// connections, against the peer's 500 workers on as many. A batch
	// holds no database connection while it sends (claims and marks are
	// shared), so the pool does not bound it.
	DefaultConcurrency = 200
	// poolReserve is what the application goroutines leave of the pool,
	// for the worker's own claims and marks.
	poolReserve = 2
)

// DeriveClients is the application goroutines for a pool of maxConns: one
// transaction per connection, less a small reserve, at least 1.
func DeriveClients(maxConns int) int { return max(1, maxConns-poolReserve) }

func (o Options) withDefaults() Options {
	d := Default()
	if o.N <= 0 {
		o.N = d.N
	}
	if len(o.Rates) == 0 {
		o.Rates = d.Rates
	}
	if o.Duration <= 0 {
		o.Duration = d.Duration
	}
	if o.Events <= 0 {
		o.Events = d.Events
	}
	if o.Endpoints <= 0 {
		o.Endpoints = d.Endpoints
	}
	if len(o.Sections) == 0 {
		o.Sections = AllSections
	}
	if o.PoolSize <= 0 {
		o.PoolSize = d.PoolSize
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Clients <= 0 {
		o.Clients = DeriveClients(o.PoolSize)
	}
	if o.PeerWorkers <= 0 {
		o.PeerWorkers = d.PeerWorkers
	}
	if o.BodyBytes <= 0 {
		o.BodyBytes = d.BodyBytes
	}
	if o.Trials <= 0 {
		o.Trials = d.Trials
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// Validate checks sections and figures.
func (o Options) Validate() error {
	for _, s := range o.Sections {
		if !slices.Contains(AllSections, s) {
			return fmt.Errorf("unknown section %q (want %s)", s, strings.Join(AllSections, ", "))
		}
	}
	for _, r := range o.Rates {
		if r <= 0 {
			return fmt.Errorf("rate %d: must be positive", r)
		}
	}
	if o.BatchSize > 0 {
		lc := (&runner{opts: o}).leases()
		if err := lc.Validate(); err != nil {
			return fmt.Errorf("batch size %d: %w", o.BatchSize, err)
		}
	}
	return nil
}

func (o Options) want(section string) bool { return slices.Contains(o.Sections, section) }

// ErrCheck is matched (errors.Is) by a failed correctness check: a path
// that lost, duplicated or failed messages. Its figures are not reported.
var ErrCheck = errors.New("bench: correctness check failed")

func checkf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCheck, fmt.Sprintf(format, args...))
}

// Run finds Postgres the way the tests do (pgserver.Find with envVars),
// creates a fresh database postbox_bench_<random>, migrates it, runs the
// sections and drops the database unless keep is set. The report names
// the database; with keep it stays for inspection.
func Run(ctx context.Context, opts Options, keep bool, envVars ...string) (*Report, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	url, name, cleanup, err := scratchDatabase(ctx, opts.Progress, keep, envVars...)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep, err := RunURL(ctx, url, opts)
	if rep != nil {
		rep.Database = name
		if keep {
			rep.Database += " (kept)"
		}
	}
	return rep, err
}

// scratchDatabase finds Postgres the way the tests do (pgserver.Find with
// envVars), creates a fresh database postbox_bench_<random> and migrates
// it. cleanup drops it unless keep, and closes what Find opened.
func scratchDatabase(ctx context.Context, progress io.Writer, keep bool, envVars ...string) (url, name string, cleanup func(), err error) {
	logger := slog.New(slog.DiscardHandler)
	srv, err := pgserver.Find(ctx, logger, envVars...)
	if err != nil {
		return "", "", nil, err
	}
	name = "postbox_bench_" + randomHex(6)
	url, err = pgserver.CreateDatabase(ctx, srv.URL, name, "")
	if err != nil {
		srv.Close()
		return "", "", nil, err
	}
	cleanup = func() {
		if !keep {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := pgserver.DropDatabase(dctx, srv.URL, name); err != nil {
				fmt.Fprintf(progress, "bench: drop database %s: %v\n", name, err)
			}
		}
		srv.Close()
	}
	fmt.Fprintf(progress, "bench: database %s on %s (%s)\n", name, redactURL(srv.URL), srv.Source)
	if err := migrate(ctx, url); err != nil {
		cleanup()
		return "", "", nil, err
	}
	return url, name, cleanup, nil
}

func migrate(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.New(pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Up(ctx)
}

// RunURL runs the sections on an existing, migrated database that nothing
// else uses: it truncates the postbox and River tables between sections.
func RunURL(ctx context.Context, url string, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &runner{opts: opts, url: url, progress: opts.Progress, body: body(opts.BodyBytes)}
	r.rep = &Report{Options: opts, Started: time.Now()}
	var err error
	if r.rep.Machine, err = r.machine(ctx); err != nil {
		return nil, err
	}
	steps := []struct {
		on  bool
		run func(context.Context) error
	}{
		{opts.want(SectionEmail) || opts.want(SectionEnqueue), r.emailSection},
		{opts.want(SectionEnqueue), r.enqueueNoWake},
		{opts.want(SectionLatency), r.latency},
		{opts.want(SectionWebhook), r.webhook},
		{opts.want(SectionCeiling), r.ceiling},
	}
	for _, s := range steps {
		if !s.on {
			continue
		}
		if err := r.truncate(ctx); err != nil {
			return r.rep, err
		}
		if err := s.run(ctx); err != nil {
			return r.rep, err
		}
	}
	if opts.Explain {
		if err := r.truncate(ctx); err != nil {
			return r.rep, err
		}
		if err := r.explain(ctx); err != nil {
			return r.rep, err
		}
	}
	r.rep.Elapsed = time.Since(r.rep.Started)
	if end := loadAvg(); end != "" && r.rep.Machine.LoadAvg != "" {
		r.rep.Machine.LoadAvg += " → " + end
	}
	return r.rep, nil
}

// runner carries one run's state.
type runner struct {
	opts     Options
	url      string
	progress io.Writer
	body     string
	rep      *Report
	lastCPU  float64 // µs of CPU per message of the last email path run
}

// leases are the dispatcher's figures for this run.
func (r *runner) leases() leases.Config {
	lc := leases.Default()
	if r.opts.BatchSize > 0 {
		lc.BatchSize = r.opts.BatchSize
		lc.BatchTimeout = max(lc.BatchTimeout, time.Duration(lc.BatchSize)*lc.PerRowBudget)
	}
	return lc
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "bench: "+format+"\n", args...)
}

func (r *runner) add(row Row) { r.rep.Rows = append(r.rep.Rows, row) }

// pool opens a pool of size conns on the bench database.
func (r *runner) pool(ctx context.Context, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(r.url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	cfg.MinConns = int32(conns) // open them all up front: no dialling inside a timed phase
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	// MinConns fills in the background; wait so the timed phase starts warm.
	deadline := time.Now().Add(10 * time.Second)
	for pool.Stat().TotalConns() < int32(conns) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return pool, nil
}

// truncate empties every table a section writes, so each starts alike.
func (r *runner) truncate(ctx context.Context) error {
	pool, err := r.pool(ctx, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `TRUNCATE email_outbox, email_attempts, email_events, email_requeues, email_suppressions,
webhook_delivery_attempts, webhook_deliveries, webhook_events, webhook_outbox, webhook_endpoint_secrets, webhook_endpoints, webhook_event_types,
river_job, river_leader`)
	if err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	return nil
}

// settle makes the start of every timed phase alike: fresh statistics for
// the planner (a production table has them; a just-filled one does not
// until autovacuum comes by) and a checkpoint, so no phase pays for the
// previous one's dirty pages. A failed checkpoint (no privilege) is noted
// and ignored.
func (r *runner) settle(ctx context.Context, pool *pgxpool.Pool, tables ...string) error {
	for _, t := range tables {
		if _, err := pool.Exec(ctx, "ANALYZE "+t); err != nil {
			return fmt.Errorf("analyze %s: %w", t, err)
		}
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil && !r.rep.noCheckpoint {
		r.rep.noCheckpoint = true
		r.logf("CHECKPOINT refused (%v); phases start without one", err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// body is a deterministic text body of n bytes in 72-column lines.
func body(n int) string {
	const words = "Thank you for your business. Your invoice is attached below; " +
		"the amount due will be collected on the due date from the card on file. "
	var b strings.Builder
	b.Grow(n)
	col := 0
	for i := 0; b.Len() < n; i++ {
		c := words[i%len(words)]
		if col >= 71 && c == ' ' {
			b.WriteByte('\n')
			col = 0
			continue
		}
		b.WriteByte(c)
		col++
	}
	return b.String()[:n]
}

func redactURL(u string) string {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
}
