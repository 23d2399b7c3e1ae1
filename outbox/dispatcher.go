package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/tracing"
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
// and marks are shared (see emailSource.Claim and markGroups), so Concurrency is
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
	// on its own SMTP connection — across every Run and Drain at
	// once; 0 means DefaultConcurrency. It is EMAIL_CONCURRENCY, the
	// per-process cap.
	Concurrency int

	// RateLimit is the most messages a second the whole pool sends
	// (EMAIL_RATE_LIMIT): a token bucket in the database that every
	// replica's claims take from (see RateBurst); 0 means no limit. Every
	// replica should be given the same.
	RateLimit float64

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

	// TracerProvider makes the spans of each attempt and its mark, each
	// joined to the trace the row was enqueued in; nil means the global
	// provider (OpenTelemetry's no-op one unless the program installs an
	// SDK).
	TracerProvider trace.TracerProvider

	// Keys opens the payload fields that Enqueue, an earlier mark or Rekey
	// sealed, and seals the plaintext secret fields of a plain-SQL row whose
	// attempt does not send it, in the retry or failed mark. It must hold
	// every key id that pending and failed rows are sealed under: a field
	// under a key id it lacks fails its row permanently. Nil means no keys:
	// sealed rows fail, plaintext rows stay plaintext until sent.
	Keys *KeyRing

	// SecretKeys are payload keys beside SecretPayloadKeys that hold
	// secrets; a Renderer that is a SecretKeyer adds its own. The
	// Dispatcher declares them in the database before its first claim
	// (DeclareSecretKeys), so every mark scrubs them, and seals them with
	// Keys in the mark of a row that is going to wait. Each must pass
	// ValidateSecretKey.
	SecretKeys []string

	// KindPriorities are kinds' own priorities (a template directory's
	// kind.json declares them); a Renderer that is a KindPrioritizer adds
	// its own. The Dispatcher declares them in the database before its
	// first claim (DeclareKindPriorities), so every row of the kind
	// written without a priority takes it, from Go and plain SQL alike.
	KindPriorities map[Kind]Priority
}

// KindPrioritizer is a Renderer whose kinds have priorities of their own
// (templatedir.Set): NewDispatcher adds them to Config.KindPriorities.
type KindPrioritizer interface {
	KindPriorities() map[Kind]Priority
}

// Tally counts what a batch, a drain or a shift did. The webhook side
// returns the same type: one shape for every outbox.
type Tally = engine.Tally

// Dispatcher claims, sends and marks email_outbox rows. It is safe for
// concurrent use: any number of Run and Drain calls, in this
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
	// secretKeys are Config.SecretKeys and the Renderer's, sorted, and
	// priorities Config.KindPriorities and the Renderer's; declared is set
	// once they are in email_secret_keys and email_kind_priorities.
	secretKeys []string
	priorities map[Kind]Priority
	declared   atomic.Bool
	backoff    leases.Backoff
	marks      *markGroups
	tracer     trace.Tracer
	slots      *engine.Slots
	lane       *engine.Lane
	fair       claim.Fair    // where the lane's claims start, and the customers they share out among (see emailSource.Claim)
	bucket     *claim.Bucket // EMAIL_RATE_LIMIT's; nil: no limit

	stopOnce sync.Once
	stop     chan struct{}

	// leases.SuppressionBudget and leases.BrandingBudget (see
	// docs/design/outbox-transport.md, Derived constants); fields only so
	// tests can shrink them instead of waiting 5 s.
	suppressionBudget time.Duration
	brandingBudget    time.Duration
	// suppressionMaxAge is how old a batch's view of the suppression list
	// may be at a send before it is read again (suppressionView);
	// SuppressionMaxAge, a field so tests can set it to zero.
	suppressionMaxAge time.Duration
	// throttleRetry is ThrottleRetry, a field so tests can shrink it.
	throttleRetry throttleWait

	hooks hooks
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
	if math.IsNaN(cfg.RateLimit) || cfg.RateLimit < 0 || cfg.RateLimit > MaxRateLimit {
		return nil, fmt.Errorf("outbox: NewDispatcher: RateLimit %g: must be from 0 (no limit) to %d", cfg.RateLimit, MaxRateLimit)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var rendererKeys []string
	if sk, ok := cfg.Renderer.(SecretKeyer); ok {
		rendererKeys = sk.SecretPayloadKeys()
	}
	secretKeys, err := secretKeySet(cfg.SecretKeys, rendererKeys)
	if err != nil {
		return nil, fmt.Errorf("outbox: NewDispatcher: %w", err)
	}
	priorities := maps.Clone(cfg.KindPriorities)
	if kp, ok := cfg.Renderer.(KindPrioritizer); ok {
		if priorities == nil {
			priorities = map[Kind]Priority{}
		}
		maps.Copy(priorities, kp.KindPriorities())
	}
	for k, p := range priorities {
		if err := k.Validate(); err != nil {
			return nil, fmt.Errorf("outbox: NewDispatcher: KindPriorities: %w", err)
		}
		if err := p.Validate(); err != nil || p == 0 {
			return nil, fmt.Errorf("outbox: NewDispatcher: KindPriorities: kind %q has priority %d, not from %d to %d", k, p, MinPriority, MaxPriority)
		}
	}
	d := &Dispatcher{
		db:         db,
		sender:     cfg.Sender,
		renderer:   cfg.Renderer,
		leases:     cfg.Leases,
		afterSend:  cfg.AfterSend,
		logger:     cfg.Logger,
		metrics:    cfg.Metrics,
		keys:       cfg.Keys,
		secretKeys: secretKeys,
		priorities: priorities,
		marks:      newMarkGroups(db, markWriters(cfg.Concurrency), cfg.Logger),
		backoff:    cfg.Backoff,
		tracer:     tracing.Tracer(cfg.TracerProvider),
		slots:      engine.NewSlots(cfg.Concurrency),
		bucket:     emailBucket(cfg.RateLimit),
		stop:       make(chan struct{}),

		suppressionBudget: leases.SuppressionBudget,
		brandingBudget:    leases.BrandingBudget,
		suppressionMaxAge: SuppressionMaxAge,
		throttleRetry:     throttleWait(ThrottleRetry),
	}
	d.lane = engine.NewLane(engine.LaneConfig{
		Name:    table.Name,
		Source:  emailSource{d},
		Slots:   d.slots,
		Wake:    cfg.Wake,
		Poll:    cfg.Poll,
		Logger:  cfg.Logger,
		Metrics: cfg.Metrics.engine(),
		Tracer:  d.tracer,
		// One sweep per interval across the pool covers every replica's
		// window (claim.Sweep).
		SweepGate: &engine.Gate{DB: db, Name: table.Name + "_sweep", Owner: "email", Lease: engine.DefaultSweepEvery},
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
// under their own budgets. Call it before stopping River; Run and Drain
// return as soon as their started rows are recorded. Stop is
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

// runBatch claims one batch (up to Leases.BatchSize rows) and works it:
// a batch context of Leases.BatchTimeout, then each row in turn under its
// own PerRowBudget, each followed by its detached CAS mark. A row starts
// only while a full PerRowBudget remains in the batch (and the dispatcher
// is not stopping); the rest are released at once. It takes one of the
// dispatcher's slots, waiting for one if all are busy.
//
// The error is a claim failure, or the joined errors of marks that could
// not run. Stale marks are not errors: they are counted and logged.
//
// It is the package's tests' way to work exactly one batch, outside a
// Lane's rhythm; the product runs batches only through the Lane (Run,
// Drain), which also recovers a batch's panic.
func (d *Dispatcher) runBatch(ctx context.Context) (Tally, error) {
	if why := d.cannotStart(ctx); why != "" {
		return Tally{}, nil
	}
	if d.slots.Acquire(ctx, 1, 1) == 0 {
		return Tally{}, nil
	}
	defer d.slots.Release(1)
	c, err := emailSource{d}.Claim(ctx, 1)
	t := Tally{Claims: 1, Claimed: c.Rows}
	if err != nil || len(c.Units) == 0 {
		return t, err
	}
	u := c.Units[0].(*batch)
	t.Add(u.Run(ctx))
	return t, errors.Join(u.markErrs...)
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
