package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/postbox/postbox/internal/claim"
	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

// Sender sends one rendered message. *smtp.Mailer implements it; tests use
// fakes. Errors matching smtp.ErrPermanent fail the row at once; anything
// else is retried.
type Sender interface {
	Send(ctx context.Context, msg smtp.Message) error
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, msg smtp.Message) error

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, msg smtp.Message) error { return f(ctx, msg) }

// DefaultConcurrency is Config.Concurrency's default. Rows within a batch
// are sent one after another, which is what BatchSize×PerRowBudget ≤
// BatchTimeout assumes; throughput comes from batches in parallel. A batch
// in flight holds an SMTP connection, not a database connection: claims
// and marks are shared (see Claim and markGroups), so Concurrency is
// bounded by what the relay accepts, not by the pool.
const DefaultConcurrency = 16

// Config configures a Dispatcher. Only Sender is required.
type Config struct {
	// Sender sends rendered messages.
	Sender Sender

	// Renderer turns rows into messages; nil means DefaultRenderer().
	Renderer Renderer

	// Leases are the batch and row figures; the zero value means
	// leases.Default(). They must pass leases.Config.Validate.
	Leases leases.Config

	// Concurrency is the most batches in flight in this Dispatcher — each
	// on its own SMTP connection — across every Run, Drain and RunBatch at
	// once; 0 means DefaultConcurrency. It is EMAIL_CONCURRENCY, the
	// per-process cap.
	Concurrency int

	// Wake receives a value when email_outbox rows were committed
	// (jobs.Waker); nil means Run polls only.
	Wake <-chan struct{}

	// Poll is how often an idle Run claims without a wake-up: the
	// fallback for a lost notification, and the idle cost (one claim
	// query per Poll). Zero means one second.
	Poll time.Duration

	// AfterSend, if set, is the post-send report: it is called once for
	// every started row after its mark, with what was recorded, on a
	// context of leases.BounceReportBudget. It runs after the mark, not
	// before, so a slow or crashing report can never delay or lose the
	// record of a send. A panic in it is recovered and logged.
	AfterSend func(ctx context.Context, r Result)

	// Logger receives one structured line per decision worth reading (never
	// payload contents); nil means slog.Default().
	Logger *slog.Logger

	// Metrics, if set, receives the dispatcher's Prometheus series.
	Metrics *Metrics

	// Backoff is the wait after each transient failure; nil means
	// leases.EmailBackoff (15 slots, about 72 h). Its length bounds the
	// retries: when the slots run out the row fails.
	Backoff leases.Backoff

	// Keys opens the payload fields that Enqueue, an earlier mark or Rekey
	// sealed, and seals the plaintext secret fields of a plain-SQL row whose
	// attempt does not send it, in the retry or failed mark. It must hold
	// every key id that pending and failed rows are sealed under: a field
	// under a key id it lacks fails its row permanently. Nil means no keys:
	// sealed rows fail, plaintext rows stay plaintext until sent.
	Keys *KeyRing
}

// Tally counts what a batch, a drain or a shift did. The webhook side
// returns the same type: one shape for every outbox.
type Tally = engine.Tally

// Dispatcher claims, sends and marks email_outbox rows. It is safe for
// concurrent use: any number of Run, Drain and RunBatch calls, in this
// process or others, share the table through the claim lease and CAS
// marks, and share this Dispatcher's Concurrency slots.
type Dispatcher struct {
	db        DB
	sender    Sender
	renderer  Renderer
	leases    leases.Config
	afterSend func(context.Context, Result)
	logger    *slog.Logger
	metrics   *Metrics
	keys      *KeyRing
	backoff   leases.Backoff
	marks     *markGroups
	slots     *engine.Slots
	lane      *engine.Lane

	stopOnce sync.Once
	stop     chan struct{}

	// leases.SuppressionBudget and leases.BrandingBudget (ADR-072
	// decision 2); fields only so tests can shrink them instead of
	// waiting 5 s.
	suppressionBudget time.Duration
	brandingBudget    time.Duration
	// suppressionMaxAge is how old a batch's view of the suppression list
	// may be at a send before it is read again (suppressionView);
	// SuppressionMaxAge, a field so tests can set it to zero.
	suppressionMaxAge time.Duration

	hooks dispatcherHooks
}

// NewDispatcher returns a Dispatcher over db, which must be a pool (see DB).
func NewDispatcher(db DB, cfg Config) (*Dispatcher, error) {
	if db == nil {
		return nil, errors.New("outbox: NewDispatcher: db is nil")
	}
	if cfg.Sender == nil {
		return nil, errors.New("outbox: NewDispatcher: Config.Sender is required")
	}
	if cfg.Leases == (leases.Config{}) {
		cfg.Leases = leases.Default()
	}
	if err := cfg.Leases.Validate(); err != nil {
		return nil, fmt.Errorf("outbox: NewDispatcher: %w", err)
	}
	if cfg.Renderer == nil {
		cfg.Renderer = DefaultRenderer()
	}
	if cfg.Backoff == nil {
		cfg.Backoff = leases.EmailBackoff
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dispatcher{
		db:        db,
		sender:    cfg.Sender,
		renderer:  cfg.Renderer,
		leases:    cfg.Leases,
		afterSend: cfg.AfterSend,
		logger:    cfg.Logger,
		metrics:   cfg.Metrics,
		keys:      cfg.Keys,
		marks:     newMarkGroups(db, markWriters(cfg.Concurrency), cfg.Logger),
		backoff:   cfg.Backoff,
		slots:     engine.NewSlots(cfg.Concurrency),
		stop:      make(chan struct{}),

		suppressionBudget: leases.SuppressionBudget,
		brandingBudget:    leases.BrandingBudget,
		suppressionMaxAge: SuppressionMaxAge,
	}
	d.lane = engine.NewLane(engine.LaneConfig{
		Name:    table.Name,
		Source:  d,
		Slots:   d.slots,
		Wake:    cfg.Wake,
		Poll:    cfg.Poll,
		Logger:  cfg.Logger,
		Metrics: cfg.Metrics.engine(),
	})
	return d, nil
}

// Leases returns the figures the dispatcher runs with, so River job
// timeouts can be derived from them.
func (d *Dispatcher) Leases() leases.Config { return d.leases }

// Slots is the dispatcher's per-process cap, for metrics and tests.
func (d *Dispatcher) Slots() *engine.Slots { return d.slots }

// Stop asks the dispatcher to wind down, for graceful shutdown: no batch is
// claimed after it, no further row of a running batch is started (those
// rows are released at once), and rows already started finish and mark
// under their own budgets. Call it before stopping River; Run, Drain and
// RunBatch return as soon as their started rows are recorded. Stop is
// idempotent; a stopped Dispatcher stays stopped.
func (d *Dispatcher) Stop() {
	d.stopOnce.Do(func() {
		close(d.stop)
		d.lane.Stop()
	})
}

// Run is one shift of the email lane on this replica: it claims batches
// whenever rows are due and slots are free — woken by Config.Wake, else by
// its poll — until window ends, ctx ends or the dispatcher stops, then
// waits for the batches it started. Give ctx at least window +
// Leases.BatchTimeout + Leases.LeaseSlack (RunTimeout).
func (d *Dispatcher) Run(ctx context.Context, window time.Duration) (Tally, error) {
	return d.lane.Run(ctx, engine.RunOptions{Window: window})
}

// RunTimeout is the longest a Run of window lasts: the window, a whole
// BatchTimeout for a batch started as it closes, and LeaseSlack for that
// batch's detached marks and releases.
func (d *Dispatcher) RunTimeout(window time.Duration) time.Duration {
	return window + d.leases.BatchTimeout + d.leases.LeaseSlack
}

// Drain runs batches until no due row is left, the window ends, ctx is
// done or the dispatcher is stopping, with the same claims, slots and
// batches as Run. One claim statement takes rows for every free slot, so
// claims are shared by many batches instead of one each, the way River's
// producer fetches for all its idle workers. A batch started before the
// window ends runs to completion: give ctx at least RunTimeout(window).
func (d *Dispatcher) Drain(ctx context.Context, window time.Duration) (Tally, error) {
	return d.lane.Run(ctx, engine.RunOptions{Window: window, UntilIdle: true})
}

// RunBatch claims one batch (up to Leases.BatchSize rows) and works it:
// a batch context of Leases.BatchTimeout, then each row in turn under its
// own PerRowBudget, each followed by its detached CAS mark. A row starts
// only while a full PerRowBudget remains in the batch (and the dispatcher
// is not stopping); the rest are released at once. It takes one of the
// dispatcher's slots, waiting for one if all are busy.
//
// The error is a claim failure, or the joined errors of marks that could
// not run. Stale marks are not errors: they are counted and logged.
func (d *Dispatcher) RunBatch(ctx context.Context) (Tally, error) {
	if why := d.cannotStart(ctx); why != "" {
		return Tally{}, nil
	}
	if d.slots.Acquire(ctx, 1, 1) == 0 {
		return Tally{}, nil
	}
	defer d.slots.Release(1)
	c, err := d.Claim(ctx, 1)
	t := Tally{Claims: 1, Claimed: c.Rows}
	if err != nil || len(c.Units) == 0 {
		return t, err
	}
	u := c.Units[0].(*batch)
	t.Add(u.Run(ctx))
	return t, errors.Join(u.markErrs...)
}

// batch is claimed rows that one goroutine works through in order, by a
// deadline BatchTimeout after the claim began, so the chain
// BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease holds for it exactly
// as if it had been claimed alone. It is the email lane's engine.Unit.
type batch struct {
	d        *Dispatcher
	rows     []Row
	deadline time.Time
	supp     *suppressionView

	next int // rows[:next] are attempted (their marks may be in flight) or released

	mu       sync.Mutex // guards tally and markErrs: marks finish on their own goroutines
	tally    Tally
	markErrs []error
}

// Claim claims up to n batches' rows in one statement (ADR-072 decision
// 1: one short claim transaction), each row under the lease of a single
// batch, and deals them out over the n slots: a full claim makes n batches
// of Leases.BatchSize, and a short one — a few rows just committed — one
// batch per row up to n, so they are sent side by side rather than one
// after another. It also reads the suppression entries of every claimed
// recipient in one query. It is the email lane's engine.Source.
func (d *Dispatcher) Claim(ctx context.Context, n int) (engine.Claim, error) {
	if d.stopping() {
		return engine.Claim{}, nil
	}
	size := d.leases.BatchSize
	start := time.Now()
	deadline := start.Add(d.leases.BatchTimeout)
	// A second short of the lease, for the clocks of this process and
	// Postgres to disagree by.
	leaseEnd := start.Add(d.leases.ClaimLease(size) - time.Second)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	rows, err := Claim(ctx, d.db, n*size, d.leases.ClaimLease(size))
	if err != nil {
		return engine.Claim{}, fmt.Errorf("outbox: %w", err)
	}
	d.metrics.engine().Claimed(table.Name, len(rows))
	if len(rows) == 0 {
		return engine.Claim{}, nil
	}
	// Decoding (JSON, and opening sealed fields) is most of a claim's CPU;
	// done per batch in parallel it does not hold back the first sends.
	chunks := deal(rows, n)
	var wg sync.WaitGroup
	for _, chunk := range chunks {
		wg.Go(func() {
			for i := range chunk {
				chunk[i].leaseEnd = leaseEnd
				d.decode(&chunk[i])
			}
		})
	}
	wg.Wait()
	supp := d.loadSuppressions(ctx, rows)
	units := make([]engine.Unit, 0, len(chunks))
	for _, chunk := range chunks {
		units = append(units, &batch{d: d, rows: chunk, deadline: deadline, supp: supp.view(chunk)})
	}
	return engine.Claim{Units: units, Rows: len(rows), Full: len(rows) == n*size}, nil
}

// deal splits rows, oldest first, into at most n batches as even as can
// be, keeping each batch in claim order; no batch is larger than the
// claim's BatchSize, since rows ≤ n × BatchSize.
func deal(rows []Row, n int) [][]Row {
	k := min(n, len(rows))
	out := make([][]Row, 0, k)
	for i := range k {
		lo, hi := i*len(rows)/k, (i+1)*len(rows)/k
		out = append(out, rows[lo:hi])
	}
	return out
}

// decode decodes one claimed row. A panic in it (a bug, or a payload that
// trips one) is that row's transient failure, recorded with the panic
// value when the row's turn comes; it stops neither the claim nor the
// process.
func (d *Dispatcher) decode(row *Row) {
	defer func() {
		if v := recover(); v != nil {
			d.logger.Error("email row decode panicked; recorded as a transient failure",
				"row_id", row.ID, "panic", fmt.Sprint(v))
			row.decodeErr = &engine.PanicError{Value: v}
		}
	}()
	if h := d.hooks.decode; h != nil {
		h(row)
	}
	row.decode(d.keys)
}

// Run sends the batch's rows one after another on its connection and
// releases the rows it may not start. Each row's mark is asked for as soon
// as its send returns and runs while the next row is sent: the relay's
// time per message, not the commit's, paces the batch. Run returns once
// every mark is recorded.
func (b *batch) Run(ctx context.Context) Tally {
	d := b.d
	batchCtx, cancel := context.WithDeadline(ctx, b.deadline)
	defer cancel()
	var marks sync.WaitGroup
	defer marks.Wait()
	for b.next < len(b.rows) {
		if why := d.cannotStart(batchCtx); why != "" {
			b.release(batchCtx, why)
			break
		}
		row := &b.rows[b.next]
		if h := d.hooks.beforeRow; h != nil {
			h(row)
		}
		res := d.attemptRow(batchCtx, row, b.supp)
		b.next++
		marks.Go(func() { b.finish(ctx, row, res) })
	}
	marks.Wait()
	return b.snapshot()
}

// finish records one attempted row and counts it, on the mark's own
// goroutine, which no River job guards: a panic in the bookkeeping is that
// row's transient failure, recorded with the panic value.
func (b *batch) finish(ctx context.Context, row *Row, res Result) {
	defer func() {
		if v := recover(); v != nil {
			b.d.logger.Error("email mark bookkeeping panicked; recording the row as a transient failure",
				"row_id", row.ID, "panic", fmt.Sprint(v))
			b.recordPanic(ctx, row, v)
		}
	}()
	b.count(b.d.finishRow(ctx, row, res), true)
}

// recordPanic records row as a transient failure carrying the panic
// value v. If that panics too, the row keeps its lease and is claimed
// again when it expires.
func (b *batch) recordPanic(ctx context.Context, row *Row, v any) {
	defer func() {
		if v2 := recover(); v2 != nil {
			b.d.logger.Error("recording a panicked row panicked; it waits out its lease", "row_id", row.ID, "panic", fmt.Sprint(v2))
			b.mu.Lock()
			b.tally.Panics++
			b.tally.NoteError((&engine.PanicError{Value: v}).Error())
			b.mu.Unlock()
		}
	}()
	res := Result{RowID: row.ID, Kind: row.Kind, Attempt: row.Attempts, Outcome: OutcomeRetry, Err: &engine.PanicError{Value: v}}
	b.d.record(ctx, row, &res)
	b.count(res, true)
}

func (b *batch) snapshot() Tally {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tally
}

// Panicked records the row that was being worked when Run panicked as a
// transient failure carrying the panic value, and releases the rows after
// it. If the panic came after that row's mark, the retry mark is stale
// and dropped: the mark already recorded stands.
func (b *batch) Panicked(ctx context.Context, v any) Tally {
	if b.next < len(b.rows) {
		row := &b.rows[b.next]
		b.next++
		res := Result{RowID: row.ID, Kind: row.Kind, Attempt: row.Attempts, Outcome: OutcomeRetry, Err: &engine.PanicError{Value: v}}
		b.d.record(ctx, row, &res)
		b.count(res, false) // the Lane counts this panic
	}
	if b.next < len(b.rows) {
		b.release(ctx, "an earlier row of the batch panicked")
	}
	return b.snapshot()
}

// count adds one started row's recorded result; countPanic counts a panic
// its attempt recovered, so the shift reports it.
func (b *batch) count(row Result, countPanic bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := &b.tally
	t.Started++
	if _, ok := errors.AsType[*engine.PanicError](row.Err); ok && countPanic {
		t.Panics++
	}
	switch {
	case errors.Is(row.Mark, ErrStaleMark):
		t.Stale++
		return
	case row.Mark != nil:
		t.MarkErrors++
		t.NoteError(row.Mark.Error())
		b.markErrs = append(b.markErrs, row.Mark)
		return
	}
	switch row.Outcome {
	case OutcomeSent:
		t.Sent++
		t.SentIDs = append(t.SentIDs, row.RowID)
	case OutcomeSkipped:
		t.Skipped++
	case OutcomeFailed:
		t.Failed++
		t.FailedIDs = append(t.FailedIDs, row.RowID)
		t.NoteError(errString(row.Err))
	case OutcomeRetry:
		t.Retried++
		t.FailedIDs = append(t.FailedIDs, row.RowID)
		t.NoteError(errString(row.Err))
	}
}

// cannotStart says why no further row (or batch) may start under ctx, or
// returns "" when one may.
func (d *Dispatcher) cannotStart(ctx context.Context) string {
	if d.stopping() {
		return "dispatcher stopping"
	}
	if ctx.Err() != nil {
		return "context done"
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d.leases.PerRowBudget {
		return "less than a full row budget left"
	}
	return ""
}

func (d *Dispatcher) stopping() bool {
	select {
	case <-d.stop:
		return true
	default:
		return false
	}
}

// release makes the batch's unstarted rows due again now, rather than
// leaving them to wait out a lease nobody is using.
func (b *batch) release(ctx context.Context, why string) {
	rows := b.rows[b.next:]
	b.next = len(b.rows)
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	n, err := claim.Release(ctx, b.d.db, table, ids, why, b.d.logger)
	b.d.metrics.engine().Released(table.Name, int(n))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tally.Released += int(n)
	if err != nil {
		b.markErrs = append(b.markErrs, fmt.Errorf("outbox: %w", err))
	}
}

// SuppressionMaxAge bounds how stale the list may be when a claimed row is
// sent: a batch older than this re-reads its recipients' entries (one
// query) before its next send, so a suppression added mid-batch stops the
// sends after it within a second, at most one extra query per batch per
// second.
const SuppressionMaxAge = time.Second

// view is one batch's own view of s, over that batch's recipients.
func (s suppressions) view(rows []Row) *suppressionView {
	v := &suppressionView{s: s, addrs: make([]string, 0, len(rows))}
	for i := range rows {
		if rows[i].decodeErr == nil {
			v.addrs = append(v.addrs, rows[i].recipient)
		}
	}
	return v
}

// loadSuppressions reads the suppression entries of the batch's decodable
// recipients in one query. On failure each row checks for itself.
func (d *Dispatcher) loadSuppressions(ctx context.Context, rows []Row) suppressions {
	addrs := make([]string, 0, len(rows))
	for i := range rows {
		if rows[i].decodeErr == nil {
			addrs = append(addrs, rows[i].recipient)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.suppressionBudget)
	defer cancel()
	s, err := loadSuppressions(ctx, d.db, addrs)
	if err != nil {
		d.logger.Warn("batch suppression lookup failed; checking row by row", "error", err.Error())
	}
	return s
}

// dispatcherHooks let white-box tests inject failures at the points the
// panic isolation is about. All nil outside tests.
type dispatcherHooks struct {
	decode    func(*Row)          // before each claimed row's decode
	beforeRow func(*Row)          // in the batch's loop, before each row's attempt
	record    func(*Row, *Result) // before each row's mark
}
