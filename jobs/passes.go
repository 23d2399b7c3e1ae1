package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// Pass defaults.
const (
	// DefaultRetryInterval is how often the leader inserts a webhook retry
	// pass, and about how long a pass claims: passes follow one another,
	// the gate keeping them from overlapping. At 15 s that is 5,760
	// river_job rows a day, whatever the number of replicas.
	DefaultRetryInterval = 15 * time.Second

	// retryOverlap is how much longer than the interval a retry pass's
	// window is, counted from the pass's start: the next pass, inserted
	// an interval after this one, is then already waiting at the gate when
	// this one's window closes, and takes it the moment it is released.
	// River's lateness in starting a pass (a fetch poll, a busy leader)
	// within it costs no gap; each pass waits about this long.
	retryOverlap = time.Second

	// retryGateLease is the retry gate's lease, renewed every third of it:
	// a holder that dies (kill -9) stops the retry lane pool-wide for at
	// most this long, until a waiting pass takes the gate; a holder that
	// cannot renew for two thirds of it stops claiming.
	retryGateLease = 6 * time.Second

	// DefaultPruneInterval is how often the leader inserts a prune of
	// dispatched webhook_outbox rows (webhook.Settings.OutboxRetention).
	DefaultPruneInterval = time.Hour

	// gateLease is how long a prune's or a history pass's gate outlives
	// its holder: a replica that dies mid-pass frees the gate within it.
	gateLease = 20 * time.Second

	// pruneTimeout bounds one prune. Deletes run in chunks of a few
	// thousand rows, each a short statement, so a backlog of millions fits.
	pruneTimeout = 5 * time.Minute
)

// Gate names (postbox_gates.name).
const (
	GateWebhookRetry = "webhook_retry"
	GateWebhookPrune = "webhook_prune"
)

// RetryPassArgs is the periodic webhook retry pass: it claims due pending
// deliveries and attempts them again, behind the pool-wide webhook_retry
// gate, so at most one pass claims anywhere, each handing the gate to the
// next as its window closes (see docs/design/outbox-transport.md, Retry
// gating). A previous release's pass takes the same gate under the same
// kind, so the two exclude each other during a rolling deploy.
type RetryPassArgs struct{}

// Kind is the River job kind.
func (RetryPassArgs) Kind() string { return "postbox_webhook_retry" }

// InsertOpts puts passes on the maintenance queue, one waiting or running
// per period.
func (RetryPassArgs) InsertOpts() river.InsertOpts { return passInsertOpts(DefaultRetryInterval) }

// PruneArgs is the periodic prune of dispatched webhook_outbox rows older
// than webhook.Settings.OutboxRetention (see docs/design/outbox-transport.md,
// Retention), and of orphan delivery events (email_events with no row) older
// than PassesConfig.OrphanEventRetention, behind the webhook_prune gate;
// then the history pass (PassesConfig.History), behind its own gate.
type PruneArgs struct{}

// Kind is the River job kind.
func (PruneArgs) Kind() string { return "postbox_webhook_prune" }

// InsertOpts puts prunes on the maintenance queue, one waiting or running
// per period.
func (PruneArgs) InsertOpts() river.InsertOpts { return passInsertOpts(DefaultPruneInterval) }

// uniqueStates is the uniqueness of every periodic pass: one per kind and
// period waiting or running. River's default would also count completed
// jobs, blocking every new pass until the cleaner removed the last (24 h).
// River requires available, pending, running and scheduled; retryable is
// left out so a failed pass never blocks the next. The gate, not this,
// keeps passes from overlapping: a pass stuck "running" after its replica
// died blocks only its own period.
var uniqueStates = []rivertype.JobState{
	rivertype.JobStateAvailable,
	rivertype.JobStatePending,
	rivertype.JobStateRunning,
	rivertype.JobStateScheduled,
}

// passInsertOpts: one attempt, because a failed pass needs no retry of its
// own — the next one is the retry, and the rows' claim leases and CAS
// marks, not the job, carry every row's state.
func passInsertOpts(period time.Duration) river.InsertOpts {
	return river.InsertOpts{
		Queue:       QueueMaintenance,
		MaxAttempts: 1,
		UniqueOpts:  river.UniqueOpts{ByState: uniqueStates, ByPeriod: period},
	}
}

// Passes are the leader's periodic webhook passes over one pipeline.
type Passes struct {
	pipeline        *webhook.Dispatcher
	db              webhook.DB
	owner           string
	retryInterval   time.Duration
	retryLease      time.Duration
	orphanRetention time.Duration
	history         *History
	logger          *slog.Logger
}

// PassesConfig configures NewPasses.
type PassesConfig struct {
	Owner         string        // the replica id, for postbox_gates.holder
	RetryInterval time.Duration // zero means DefaultRetryInterval
	// OrphanEventRetention is the age past which the prune deletes orphan
	// delivery events (EVENTS_ORPHAN_RETENTION); zero means
	// outbox.DefaultOrphanEventRetention.
	OrphanEventRetention time.Duration
	// History, when set, runs in every prune after the webhook prune
	// (see History).
	History *History
	Logger  *slog.Logger
}

// NewPasses returns the passes over p, gated in db (a pool).
func NewPasses(p *webhook.Dispatcher, db webhook.DB, cfg PassesConfig) *Passes {
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.OrphanEventRetention <= 0 {
		cfg.OrphanEventRetention = outbox.DefaultOrphanEventRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Passes{pipeline: p, db: db, owner: cfg.Owner, retryInterval: cfg.RetryInterval, retryLease: retryGateLease,
		orphanRetention: cfg.OrphanEventRetention, history: cfg.History, logger: cfg.Logger}
}

// PeriodicJobs are the retry pass and the prune, for river.Config.PeriodicJobs
// on every client that may become leader (only the leader inserts them).
// Each runs on start, so a new leader acts at once.
func (p *Passes) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{
		periodicJob(p.retryInterval, RetryPassArgs{}),
		periodicJob(DefaultPruneInterval, PruneArgs{}),
	}
}

func periodicJob(interval time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(
		river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return args, nil },
		&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true},
	)
}

// Queue is the maintenance queue's config, for river.Config.Queues: four
// workers, for a retry pass holding the gate, its predecessor finishing
// the attempts it started, its successor waiting for the gate, and a
// prune (minutes long), all on one replica when it runs alone.
func (p *Passes) Queue() (string, river.QueueConfig) {
	return QueueMaintenance, river.QueueConfig{MaxWorkers: 4}
}

// AddWorkers registers the retry-pass and prune workers.
func (p *Passes) AddWorkers(workers *river.Workers) {
	river.AddWorker(workers, &RetryPassWorker{passes: p})
	river.AddWorker(workers, &PruneWorker{passes: p})
}

// Timeout is the longest a pass may run, for RescueStuckJobsAfter.
func (p *Passes) Timeout() time.Duration {
	return max(p.retryTimeout(), p.pruneTimeout())
}

// retryWindow is how long a retry pass waits for the gate and claims,
// together, from its start.
func (p *Passes) retryWindow() time.Duration { return p.retryInterval + retryOverlap }

// retryTimeout bounds one retry pass: its window, then the attempts it
// started.
func (p *Passes) retryTimeout() time.Duration { return p.pipeline.RunTimeout(p.retryWindow()) }

// pruneTimeout bounds one prune: the webhook prune's, and the history
// pass's when it runs in it.
func (p *Passes) pruneTimeout() time.Duration {
	if p.history == nil {
		return pruneTimeout
	}
	return pruneTimeout + p.history.Timeout()
}

// PassOutput is a pass's recorded output: what it did, or who held the
// gate when it did nothing.
type PassOutput struct {
	Tally  *outbox.Tally `json:"tally,omitempty"`
	Pruned *int64        `json:"pruned,omitempty"`
	// PrunedOrphanEvents is the orphan delivery events the prune deleted.
	PrunedOrphanEvents *int64 `json:"pruned_orphan_events,omitempty"`
	Held               string `json:"gate_held,omitempty"`
	// Waited, TakenAt and ReleasedAt are a retry pass's turn at the gate:
	// how long it waited for the previous holder, when it took the gate
	// and when it handed it on.
	Waited     string     `json:"gate_waited,omitempty"`
	TakenAt    *time.Time `json:"gate_taken_at,omitempty"`
	ReleasedAt *time.Time `json:"gate_released_at,omitempty"`
	// History is what the history pass in the prune did.
	History *HistoryOutput `json:"history,omitempty"`
}

// Retry runs one retry pass behind the gate: the retry lane until the
// pass's window (the retry interval and retryOverlap, from its start)
// closes. A pass that finds the gate held waits for it within its window
// and takes it as soon as the holder releases it; the holder releases it
// when its window closes, as soon as its lane's last claim has returned,
// while the attempts it started finish. So the lane runs pool-wide without a gap,
// one pass at a time. A pass whose window closes with the gate still held
// returns, its output naming the holder.
func (p *Passes) Retry(ctx context.Context) (PassOutput, error) {
	var out PassOutput
	start := time.Now()
	end := start.Add(p.retryWindow())
	gate := p.gate(GateWebhookRetry)
	gate.Lease = p.retryLease
	hold, err := gate.Acquire(ctx, end)
	if err != nil {
		return p.held(out, err)
	}
	defer hold.Close() //nolint:errcheck // released below; this ends its context
	took := time.Now()
	out.Waited, out.TakenAt = took.Sub(start).Round(time.Millisecond).String(), &took
	release := sync.OnceValues(func() (time.Time, error) {
		at := time.Now() // before the delete: the next holder takes it after this
		return at, hold.Release()
	})
	// The gate goes to the next pass once the lane's last claim has
	// returned, not once the last attempts are done.
	window := max(time.Until(end), time.Millisecond) // zero would mean no end
	t, err := p.pipeline.RunRetryTurn(hold.Context(), window, func() { _, _ = release() })
	released, rerr := release()
	out.Tally, out.ReleasedAt = &t, &released
	if t.Busy() || err != nil {
		p.logger.InfoContext(ctx, "webhook retry pass", "claimed", t.Claimed, "sent", t.Sent, "failed", t.Failed,
			"retried", t.Retried, "released", t.Released, "stale", t.Stale, "panics", t.Panics, "waited", out.Waited)
	}
	return out, errors.Join(err, t.Err(), rerr)
}

// Prune runs one prune behind the gate: dispatched webhook_outbox rows,
// then orphan delivery events. One failing does not keep the other from
// running; the pass reports both.
func (p *Passes) Prune(ctx context.Context) (PassOutput, error) {
	var out PassOutput
	err := p.gate(GateWebhookPrune).Run(ctx, func(ctx context.Context) error {
		n, err := p.pipeline.Prune(ctx)
		out.Pruned = &n
		orphans, oerr := outbox.PruneOrphanEvents(ctx, p.db, p.orphanRetention)
		out.PrunedOrphanEvents = &orphans
		if orphans > 0 {
			p.logger.InfoContext(ctx, "orphan delivery events pruned", "events", orphans, "retention", p.orphanRetention.String())
		}
		return errors.Join(err, oerr)
	})
	out, err = p.held(out, err)
	if p.history != nil {
		// Behind a gate of its own: a prune held elsewhere does not keep
		// the weeks ahead from being made here.
		h, herr := p.history.Run(ctx)
		out.History = &h
		if herr != nil {
			p.logger.ErrorContext(ctx, "history pass failed", "error", herr)
		}
		err = errors.Join(err, herr)
	}
	return out, err
}

func (p *Passes) gate(name string) engine.Gate {
	return engine.Gate{DB: p.db, Name: name, Owner: p.owner, Lease: gateLease}
}

// held turns a held gate into the pass's output: by design, not a failure.
func (p *Passes) held(out PassOutput, err error) (PassOutput, error) {
	var h *engine.GateHeldError
	if errors.As(err, &h) {
		out.Held = h.Error()
		return out, nil
	}
	return out, err
}

// RetryPassWorker works RetryPassArgs.
type RetryPassWorker struct {
	river.WorkerDefaults[RetryPassArgs]
	passes *Passes
}

// Work runs a retry pass and records its output.
func (w *RetryPassWorker) Work(ctx context.Context, _ *river.Job[RetryPassArgs]) error {
	return record(ctx, "webhook retry pass", w.passes.Retry)
}

// Timeout bounds one pass.
func (w *RetryPassWorker) Timeout(*river.Job[RetryPassArgs]) time.Duration {
	return w.passes.retryTimeout()
}

// PruneWorker works PruneArgs.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	passes *Passes
}

// Work prunes and records how many rows went.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	return record(ctx, "webhook prune", w.passes.Prune)
}

// Timeout bounds one prune.
func (w *PruneWorker) Timeout(*river.Job[PruneArgs]) time.Duration { return w.passes.pruneTimeout() }

func record(ctx context.Context, what string, pass func(context.Context) (PassOutput, error)) error {
	out, err := pass(ctx)
	if oerr := river.RecordOutput(ctx, out); oerr != nil {
		err = errors.Join(err, oerr)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
