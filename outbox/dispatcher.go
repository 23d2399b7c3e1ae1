package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/postbox/postbox/internal/claim"
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

// DefaultConcurrency is how many batches Drain keeps in flight when
// Config.Concurrency is 0. Rows within a batch are sent one after another,
// which is what BatchSize×PerRowBudget ≤ BatchTimeout assumes; throughput
// comes from batches in parallel. A batch in flight holds an SMTP
// connection, not a database connection: claims and marks are shared
// (see Drain and markGroups), so Concurrency is bounded by what the relay
// accepts, not by the pool.
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

	// Concurrency is the number of batches Drain runs at once; 0 means
	// DefaultConcurrency.
	Concurrency int

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
	// claim.EmailBackoff (15 slots, about 72 h). Its length bounds the
	// retries: when the slots run out the row fails.
	Backoff claim.Backoff

	// Keys opens the payload fields that Enqueue, an earlier mark or Rekey
	// sealed, and seals the plaintext secret fields of a plain-SQL row whose
	// attempt does not send it, in the retry or failed mark. It must hold
	// every key id that pending and failed rows are sealed under: a field
	// under a key id it lacks fails its row permanently. Nil means no keys:
	// sealed rows fail, plaintext rows stay plaintext until sent.
	Keys *KeyRing
}

// Dispatcher claims, sends and marks email_outbox rows. It is safe for
// concurrent use: any number of RunBatch and Drain calls, in this process
// or others, share the table through the claim lease and CAS marks.
type Dispatcher struct {
	db          DB
	sender      Sender
	renderer    Renderer
	leases      leases.Config
	concurrency int
	afterSend   func(context.Context, Result)
	logger      *slog.Logger
	metrics     *Metrics
	keys        *KeyRing
	backoff     claim.Backoff
	marks       *markGroups

	stopOnce sync.Once
	stop     chan struct{}
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
		cfg.Backoff = claim.EmailBackoff
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Dispatcher{
		db:          db,
		sender:      cfg.Sender,
		renderer:    cfg.Renderer,
		leases:      cfg.Leases,
		concurrency: cfg.Concurrency,
		afterSend:   cfg.AfterSend,
		logger:      cfg.Logger,
		metrics:     cfg.Metrics,
		keys:        cfg.Keys,
		marks:       newMarkGroups(db, markWriters(cfg.Concurrency)),
		backoff:     cfg.Backoff,
		stop:        make(chan struct{}),
	}, nil
}

// Leases returns the figures the dispatcher runs with, so River job
// timeouts can be derived from them.
func (d *Dispatcher) Leases() leases.Config { return d.leases }

// Stop asks the dispatcher to wind down, for graceful shutdown: no batch is
// claimed after it, no further row of a running batch is started (those
// rows are released at once), and rows already started finish and mark
// under their own budgets. Call it before stopping River; Drain and
// RunBatch return as soon as their started rows are recorded. Stop is
// idempotent; a stopped Dispatcher stays stopped.
func (d *Dispatcher) Stop() { d.stopOnce.Do(func() { close(d.stop) }) }

// BatchResult counts what one batch did.
type BatchResult struct {
	Claimed    int // rows the claim took (each one attempt)
	Started    int // rows that got a send attempt
	Sent       int // marked dispatched
	Skipped    int // marked skipped
	Failed     int // marked failed (permanent error, or backoff exhausted)
	Retried    int // marked for a retry after a transient error
	Released   int // claimed but not started: made due again at once
	StaleMarks int // marks dropped because the row was no longer pending
	MarkErrors int // marks that could not run; those rows wait out their lease
}

func (r *BatchResult) add(o BatchResult) {
	r.Claimed += o.Claimed
	r.Started += o.Started
	r.Sent += o.Sent
	r.Skipped += o.Skipped
	r.Failed += o.Failed
	r.Retried += o.Retried
	r.Released += o.Released
	r.StaleMarks += o.StaleMarks
	r.MarkErrors += o.MarkErrors
}

// RunBatch claims one batch (up to Leases.BatchSize rows) and works it:
// a batch context of Leases.BatchTimeout, then each row in turn under its
// own PerRowBudget, each followed by its detached CAS mark. A row starts
// only while a full PerRowBudget remains in the batch (and the dispatcher
// is not stopping); the rest are released at once.
//
// The error is a claim failure, or the joined errors of marks that could
// not run. Stale marks are not errors: they are counted and logged.
func (d *Dispatcher) RunBatch(ctx context.Context) (BatchResult, error) {
	if why := d.cannotStart(ctx); why != "" {
		return BatchResult{}, nil
	}
	batches, err := d.claimBatches(ctx, 1)
	if err != nil || len(batches) == 0 {
		return BatchResult{}, err
	}
	return d.workBatch(ctx, batches[0])
}

// batch is claimed rows that one goroutine works through in order, by a
// deadline BatchTimeout after the claim began, so the chain
// BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease holds for it exactly
// as if it had been claimed alone.
type batch struct {
	rows     []Row
	deadline time.Time
	supp     suppressions
}

// claimBatches claims up to n batches' rows in one statement (ADR-072
// decision 1: one short claim transaction), each row under the lease of a
// single batch, and splits them into batches of Leases.BatchSize. It also
// reads the suppression entries of every claimed recipient in one query.
func (d *Dispatcher) claimBatches(ctx context.Context, n int) ([]batch, error) {
	deadline := time.Now().Add(d.leases.BatchTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	size := d.leases.BatchSize
	rows, err := Claim(ctx, d.db, n*size, d.leases.ClaimLease(size))
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	d.metrics.addClaimed(len(rows))
	if len(rows) == 0 {
		return nil, nil
	}
	// Decoding (JSON, and opening sealed fields) is most of a claim's CPU;
	// done per batch in parallel it does not hold back the first sends.
	var wg sync.WaitGroup
	for chunk := range slices.Chunk(rows, size) {
		wg.Go(func() {
			for i := range chunk {
				chunk[i].decode(d.keys)
			}
		})
	}
	wg.Wait()
	supp := d.loadSuppressions(ctx, rows)
	batches := make([]batch, 0, n)
	for chunk := range slices.Chunk(rows, size) {
		batches = append(batches, batch{rows: chunk, deadline: deadline, supp: supp})
	}
	return batches, nil
}

// workBatch sends a claimed batch's rows one after another, each followed
// by its mark, and releases the rows it may not start.
func (d *Dispatcher) workBatch(ctx context.Context, b batch) (BatchResult, error) {
	batchCtx, cancel := context.WithDeadline(ctx, b.deadline)
	defer cancel()
	res := BatchResult{Claimed: len(b.rows)}
	var errs []error
	for i := range b.rows {
		if why := d.cannotStart(batchCtx); why != "" {
			if err := d.release(batchCtx, b.rows[i:], why, &res); err != nil {
				errs = append(errs, err)
			}
			break
		}
		r := d.runRow(batchCtx, &b.rows[i], b.supp)
		res.Started++
		res.count(r)
		if r.Mark != nil && !errors.Is(r.Mark, ErrStaleMark) {
			errs = append(errs, r.Mark)
		}
	}
	return res, errors.Join(errs...)
}

// count adds one started row's recorded result.
func (r *BatchResult) count(row Result) {
	switch {
	case errors.Is(row.Mark, ErrStaleMark):
		r.StaleMarks++
		return
	case row.Mark != nil:
		r.MarkErrors++
		return
	}
	switch row.Outcome {
	case OutcomeSent:
		r.Sent++
	case OutcomeSkipped:
		r.Skipped++
	case OutcomeFailed:
		r.Failed++
	case OutcomeRetry:
		r.Retried++
	}
}

// cannotStart says why no further row (or batch) may start under ctx, or
// returns "" when one may.
func (d *Dispatcher) cannotStart(ctx context.Context) string {
	select {
	case <-d.stop:
		return "dispatcher stopping"
	default:
	}
	if ctx.Err() != nil {
		return "context done"
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d.leases.PerRowBudget {
		return "less than a full row budget left"
	}
	return ""
}

// release makes claimed rows that will not be started due again now,
// rather than leaving them to wait out a lease nobody is using.
func (d *Dispatcher) release(ctx context.Context, rows []Row, why string, res *BatchResult) error {
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	n, err := claim.Release(ctx, d.db, table, ids)
	res.Released += int(n)
	d.metrics.addReleased(int(n))
	if err != nil {
		d.logger.Error("releasing unstarted email rows failed; they wait out their lease",
			"rows", ids, "reason", why, "error", err.Error())
		return fmt.Errorf("outbox: %w", err)
	}
	d.logger.Info("released unstarted email rows", "rows", ids, "released", n, "reason", why)
	return nil
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
	ctx, cancel := context.WithTimeout(ctx, leases.SuppressionBudget)
	defer cancel()
	s, err := loadSuppressions(ctx, d.db, addrs)
	if err != nil {
		d.logger.Warn("batch suppression lookup failed; checking row by row", "error", err.Error())
	}
	return s
}

// DrainResult counts what a Drain did.
type DrainResult struct {
	Batches int // claims made, including the final empty one
	BatchResult
}

// Drain runs batches until no due row is left, the window ends, ctx is
// done or the dispatcher is stopping, keeping up to Concurrency batches in
// flight. One claim statement takes rows for every free batch slot, and a
// new claim waits until an eighth of the slots are free, so claims are shared by
// many batches instead of one each, the way River's producer fetches for
// all its idle workers. An idle tick costs one claim query. A batch
// started before the window ends runs to completion: give ctx at least
// window + Leases.BatchTimeout.
func (d *Dispatcher) Drain(ctx context.Context, window time.Duration) (DrainResult, error) {
	type batchDone struct {
		res BatchResult
		err error
	}
	var (
		end     = time.Now().Add(window)
		total   DrainResult
		errs    []error
		done    = make(chan batchDone, d.concurrency)
		running int
		more    = true                    // no claim has come back short yet
		refill  = max(d.concurrency/8, 1) // free slots worth a claim
	)
	for {
		free := d.concurrency - running
		if more && (free >= refill || running == 0) && time.Now().Before(end) && d.cannotStart(ctx) == "" {
			batches, err := d.claimBatches(ctx, free)
			total.Batches++
			claimed := 0
			for _, b := range batches {
				claimed += len(b.rows)
				running++
				go func() {
					res, err := d.workBatch(ctx, b)
					done <- batchDone{res, err}
				}()
			}
			if err != nil {
				errs = append(errs, err)
			}
			more = err == nil && claimed == free*d.leases.BatchSize
		}
		if running == 0 {
			return total, errors.Join(errs...)
		}
		b := <-done
		running--
		total.add(b.res)
		if b.err != nil || b.res.Released > 0 {
			// A failure, or a batch that could not start its rows:
			// claiming more would only burn attempts.
			errs = append(errs, b.err)
			more = false
		}
	}
}
