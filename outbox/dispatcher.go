package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// comes from batches in parallel.
const DefaultConcurrency = 4

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
	var res BatchResult
	if why := d.cannotStart(ctx); why != "" {
		return res, nil
	}
	batchCtx, cancel := context.WithTimeout(ctx, d.leases.BatchTimeout)
	defer cancel()

	rows, err := Claim(batchCtx, d.db, d.leases.BatchSize, d.leases.ClaimLease(d.leases.BatchSize))
	if err != nil {
		return res, fmt.Errorf("outbox: %w", err)
	}
	res.Claimed = len(rows)
	d.metrics.addClaimed(len(rows))
	if len(rows) == 0 {
		return res, nil
	}
	for i := range rows {
		rows[i].decode(d.keys)
	}
	supp := d.loadSuppressions(batchCtx, rows)

	var errs []error
	for i := range rows {
		if why := d.cannotStart(batchCtx); why != "" {
			if err := d.release(batchCtx, rows[i:], why, &res); err != nil {
				errs = append(errs, err)
			}
			break
		}
		r := d.runRow(batchCtx, &rows[i], supp)
		res.Started++
		switch {
		case r.Mark == nil:
		case errors.Is(r.Mark, ErrStaleMark):
			res.StaleMarks++
			continue
		default:
			res.MarkErrors++
			errs = append(errs, r.Mark)
			continue
		}
		switch r.Outcome {
		case OutcomeSent:
			res.Sent++
		case OutcomeSkipped:
			res.Skipped++
		case OutcomeFailed:
			res.Failed++
		case OutcomeRetry:
			res.Retried++
		}
	}
	return res, errors.Join(errs...)
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
	Batches int // claims made, including the final empty ones
	BatchResult
}

// Drain runs batches until no due row is left, the window ends, ctx is
// done or the dispatcher is stopping, keeping up to Concurrency batches in
// flight. It starts with one batch and adds another each time a batch comes
// back full, so an idle tick costs one claim query. A batch started before
// the window ends runs to completion: give ctx at least window +
// Leases.BatchTimeout.
func (d *Dispatcher) Drain(ctx context.Context, window time.Duration) (DrainResult, error) {
	end := time.Now().Add(window)
	var (
		mu    sync.Mutex
		total DrainResult
		errs  []error
		wg    sync.WaitGroup
		slots = make(chan struct{}, d.concurrency)
	)
	var spawn func()
	loop := func() {
		defer wg.Done()
		defer func() { <-slots }()
		for time.Now().Before(end) {
			r, err := d.RunBatch(ctx)
			mu.Lock()
			total.Batches++
			total.add(r)
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
			if err != nil || r.Claimed < d.leases.BatchSize || r.Released > 0 {
				// No more due rows, a failure, or a batch that could not
				// start its rows: looping would only burn attempts.
				return
			}
			spawn() // a full batch: more rows may be due
		}
	}
	spawn = func() {
		select {
		case slots <- struct{}{}:
			wg.Add(1)
			go loop()
		default: // Concurrency batches already in flight
		}
	}
	spawn()
	wg.Wait()
	return total, errors.Join(errs...)
}
