package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/leases"
)

// DB is what every part of postbox takes to reach Postgres: a pool, a
// connection or a transaction (pgx's Exec, Query, QueryRow, SendBatch and
// Begin). It is the same interface as outbox.DB. NewDispatcher takes a
// pool, never a caller's transaction: the fan-out and replays each begin
// transactions of their own.
type DB = claim.DB

// Config configures a Dispatcher. Every zero field has a working default.
type Config struct {
	// Settings is the non-timing configuration; zero fields take defaults.
	Settings Settings

	// Leases are the derived timing figures (see
	// docs/design/outbox-transport.md, Derived constants); the zero value
	// means leases.Default(). They are validated by New.
	Leases leases.Config

	// Backoff is the wait after each failed attempt; nil means
	// DefaultBackoff. Its length bounds the attempts: a delivery that
	// fails len(Backoff)+1 times is failed for good (an empty, non-nil
	// Backoff allows one attempt).
	Backoff leases.Backoff

	// Wake receives a value when webhook_outbox rows were committed
	// (jobs.Waker); nil means the outbox lane polls only.
	Wake <-chan struct{}

	// RetryWake receives a value when a delivery became due at once
	// elsewhere in the pool — an ordered delivery whose key was handed on
	// to it (migration 00023's trigger notifies DeliveriesTable) — and
	// wakes the retry lane; nil leaves it to its poll.
	RetryWake <-chan struct{}

	// Poll is how often an idle lane (the outbox's, the retry pass's)
	// claims without a wake-up; zero means one second.
	Poll time.Duration

	Logger  *slog.Logger // nil means slog.Default(), as outbox.Config.Logger
	Metrics *Metrics     // nil counts nothing

	// TracerProvider makes the spans of each fan-out, attempt and mark,
	// each joined to the trace the event was enqueued in; nil means the
	// global provider (OpenTelemetry's no-op one unless the program
	// installs an SDK).
	TracerProvider trace.TracerProvider

	// OnDisable, if set, runs inside the transaction that disables an
	// endpoint — for failing (after Settings.DisableAfter) or after a 410
	// Gone — after the endpoint.disabled event to Settings.OpsEndpointID
	// is enqueued: e.g. an email to OPS_EMAIL through outbox.Enqueue, so
	// the notice exists if and only if the endpoint was disabled. An error
	// rolls the disable back; the next failure, or the next 410, tries
	// again.
	OnDisable func(ctx context.Context, tx pgx.Tx, d EndpointDisabled) error
}

// DeliveriesTable is webhook_deliveries, as wake-ups name it.
const DeliveriesTable = "webhook_deliveries"

// Dispatcher is the webhook transport over one Postgres pool: the
// webhook_outbox drainer and its atomic fan-out, first attempts in process,
// the retry worker, replay and the pruner. It is safe for concurrent use;
// two Pipelines (in one process or many) on the same database cooperate
// through claim leases and CAS marks, never through memory.
type Dispatcher struct {
	pool     DB
	cfg      Settings
	lc       leases.Config
	schedule leases.Backoff
	logger   *slog.Logger
	metrics  *Metrics
	client   *http.Client
	tracer   trace.Tracer

	// slots bound the HTTP attempts in flight across every lane, drain,
	// retry pass and replay of this Dispatcher: WEBHOOK_CONCURRENCY, the
	// per-process cap.
	slots *engine.Slots

	// fanOutWidth sizes the outbox lane's claims (outboxSource.Claim).
	fanOutWidth fanOutWidth

	outboxLane, retryLane *engine.Lane

	// marks is the group commit of the attempts' marks (claim.Group).
	marks *claim.Group

	// Where each lane's claims start in its table's claim index, and the
	// outbox lane's claims of ordered deliveries whose turn has come; the
	// outbox lane's, with the share keys it knows (claim.Fair).
	outboxFair              claim.Fair
	retryWindow, turnWindow claim.Window

	// shares is the share key (shareKeySQL) each endpoint's deliveries
	// were last fanned out under: an endpoint crowding the slots caps its
	// key's rows in the next fan-out claims (crowdedShares).
	shares sync.Map

	// orderedAt is when this replica last saw an ordered delivery
	// (UnixNano): until a minute after, its outbox lane also claims
	// deliveries whose key has come to them (claimTurns).
	orderedAt atomic.Int64

	// retryWake tells this replica's retry lane that deliveries were born
	// held (bornDeliveriesSQL) and are due for admission now.
	retryWake chan struct{}

	// onDisable is Config.OnDisable.
	onDisable func(ctx context.Context, tx pgx.Tx, d EndpointDisabled) error

	stopped  atomic.Bool   // see Stop
	stopping chan struct{} // closed by Stop
	stopOnce sync.Once

	hooks hooks
}

// NewDispatcher returns a Dispatcher over pool.
func NewDispatcher(pool DB, opts Config) (*Dispatcher, error) {
	cfg := opts.Settings.withDefaults()
	if err := checkUserAgent(cfg.UserAgent); err != nil {
		return nil, fmt.Errorf("webhook: Settings.UserAgent %q: %w", cfg.UserAgent, err)
	}
	lc := opts.Leases
	if lc == (leases.Config{}) {
		lc = leases.Default()
	}
	if err := lc.Validate(); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if err := lc.ValidateAttempts(); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	schedule := opts.Backoff
	if schedule == nil {
		schedule = DefaultBackoff
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &Dispatcher{
		pool:     pool,
		cfg:      cfg,
		lc:       lc,
		schedule: schedule,
		logger:   logger.With("component", "webhook"),
		metrics:  opts.Metrics,
		client:   newHTTPClient(cfg, lc.DeliveryBudget),
		tracer:   tracing.Tracer(opts.TracerProvider),
		slots:    engine.NewSlots(cfg.Concurrency),

		marks: claim.NewGroup(pool, claim.Writers(cfg.Concurrency), logger),

		retryWake: make(chan struct{}, 1),
		stopping:  make(chan struct{}),
		onDisable: opts.OnDisable,
	}
	if opts.RetryWake != nil {
		go p.forwardRetryWakes(opts.RetryWake)
	}
	// One sweep per interval across the pool covers every replica's
	// window (claim.Sweep).
	sweepGate := func(t claim.Table) *engine.Gate {
		return &engine.Gate{DB: pool, Name: t.Name + "_sweep", Owner: "webhook", Lease: engine.DefaultSweepEvery}
	}
	p.outboxLane = engine.NewLane(engine.LaneConfig{
		Name: outboxTable.Name, Source: outboxSource{p}, Slots: p.slots, Wake: opts.Wake, Poll: opts.Poll, Logger: p.logger,
		Metrics: opts.Metrics.engine(), SweepGate: sweepGate(outboxTable), Tracer: p.tracer,
	})
	p.retryLane = engine.NewLane(engine.LaneConfig{
		Name: deliveriesTable.Name, Source: retrySource{p}, Slots: p.slots, Wake: p.retryWake, Poll: opts.Poll, Logger: p.logger,
		Metrics: opts.Metrics.engine(), SweepGate: sweepGate(deliveriesTable), Tracer: p.tracer,
		// Its claim skips, unseen, the due rows of an endpoint whose
		// in-flight cap is full: a claim that found rows is followed by
		// hot polls that take them as the cap frees.
		HotFor: engine.DefaultHotFor,
	})
	return p, nil
}

// wakeRetries wakes this replica's retry lane, if it is running; a lane
// elsewhere finds the rows by its poll.
func (p *Dispatcher) wakeRetries() {
	select {
	case p.retryWake <- struct{}{}:
	default:
	}
}

// forwardRetryWakes wakes the retry lane for every value from the pool's
// wake-ups, until Stop.
func (p *Dispatcher) forwardRetryWakes(wake <-chan struct{}) {
	for {
		select {
		case <-wake:
			p.wakeRetries()
		case <-p.stopping:
			return
		}
	}
}

// Slots is the pipeline's per-process cap on HTTP attempts, for metrics
// and tests.
func (p *Dispatcher) Slots() *engine.Slots { return p.slots }

// Stop is the soft stop: from now on Drain, Retry and ProcessBatch claim
// nothing more, and deliveries waiting for a slot are released at once to
// the retry worker (of this replica's successor or a sibling) rather than
// started. Attempts already running finish and mark. Call it before
// stopping River, so running jobs return promptly.
func (p *Dispatcher) Stop() {
	p.stopped.Store(true)
	p.stopOnce.Do(func() { close(p.stopping) })
	p.outboxLane.Stop()
	p.retryLane.Stop()
}

// Close releases idle HTTP connections. In-flight work is not interrupted:
// cancel the contexts passed to Run, Drain, RunRetries, DrainRetries and
// the replays for that.
func (p *Dispatcher) Close() {
	p.client.CloseIdleConnections()
}

// RunTimeout is the longest a Run, Drain, RunRetries or DrainRetries of
// window lasts: the window, then a fan-out's BatchTimeout and the attempts
// already started (each bounded by DeliveryBudget), then their detached
// marks and releases, which LeaseSlack covers.
func (p *Dispatcher) RunTimeout(window time.Duration) time.Duration {
	return window + max(p.lc.BatchTimeout, p.lc.DeliveryBudget) + p.lc.LeaseSlack
}

// Tally counts what a batch, a drain, a retry pass, a replay or a shift
// did. The email outbox returns the same type: one shape for every outbox.
// Sent counts deliveries the receiver accepted (2xx), Events the outbox
// rows fanned out, Released the first attempts left to the retry worker.
type Tally = engine.Tally
