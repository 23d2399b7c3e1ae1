package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// pass, and how long a pass claims: passes follow one another, the
	// gate keeping them from overlapping. At 15 s that is 5,760 river_job
	// rows a day, whatever the number of replicas.
	DefaultRetryInterval = 15 * time.Second

	// DefaultPruneInterval is how often the leader inserts a prune of
	// dispatched webhook_outbox rows (webhook.Settings.OutboxRetention).
	DefaultPruneInterval = time.Hour

	// gateLease is how long a pass's gate outlives its holder: a replica
	// that dies mid-pass frees the gate within it.
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
// gate, so at most one pass runs anywhere (see
// docs/design/outbox-transport.md, Retry gating).
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
	db              engine.DB
	owner           string
	retryInterval   time.Duration
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
func NewPasses(p *webhook.Dispatcher, db engine.DB, cfg PassesConfig) *Passes {
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.OrphanEventRetention <= 0 {
		cfg.OrphanEventRetention = outbox.DefaultOrphanEventRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Passes{pipeline: p, db: db, owner: cfg.Owner, retryInterval: cfg.RetryInterval,
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

// AddWorkers registers the retry-pass and prune workers.
func (p *Passes) AddWorkers(workers *river.Workers) {
	river.AddWorker(workers, &RetryPassWorker{passes: p})
	river.AddWorker(workers, &PruneWorker{passes: p})
}

// Timeout is the longest a pass may run, for RescueStuckJobsAfter.
func (p *Passes) Timeout() time.Duration {
	return max(p.pipeline.RunTimeout(p.retryInterval), p.pruneTimeout())
}

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
	// History is what the history pass in the prune did.
	History *HistoryOutput `json:"history,omitempty"`
}

// Retry runs one retry pass behind the gate: the retry lane for the retry
// interval. A pass that finds the gate held returns at once, its output
// naming the holder.
func (p *Passes) Retry(ctx context.Context) (PassOutput, error) {
	var out PassOutput
	err := p.gate(GateWebhookRetry).Run(ctx, func(ctx context.Context) error {
		t, err := p.pipeline.RunRetries(ctx, p.retryInterval)
		out.Tally = &t
		if t.Busy() || err != nil {
			p.logger.InfoContext(ctx, "webhook retry pass", "claimed", t.Claimed, "sent", t.Sent, "failed", t.Failed,
				"retried", t.Retried, "released", t.Released, "stale", t.Stale, "panics", t.Panics)
		}
		return errors.Join(err, t.Err())
	})
	return p.held(out, err)
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
	return w.passes.pipeline.RunTimeout(w.passes.retryInterval)
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
