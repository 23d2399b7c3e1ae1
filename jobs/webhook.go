package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/postbox/postbox/webhook"
)

// Webhook transport defaults.
const (
	// DefaultWebhookTickInterval is how often the leader inserts a
	// webhook tick and a retry pass. Each costs one claim query when
	// nothing is due.
	DefaultWebhookTickInterval = time.Second

	// DefaultWebhookPruneInterval is how often the leader inserts a prune
	// of dispatched webhook_outbox rows (webhook.Config.OutboxRetention).
	DefaultWebhookPruneInterval = time.Hour
)

// WebhookTickArgs is the periodic webhook tick: it drains webhook_outbox,
// fanning each row out and making the first attempts.
type WebhookTickArgs struct{}

// Kind is the River job kind.
func (WebhookTickArgs) Kind() string { return "postbox_webhook_tick" }

// InsertOpts puts ticks on the webhook queue, one waiting or running at a
// time (see webhookInsertOpts).
func (WebhookTickArgs) InsertOpts() river.InsertOpts { return triggerInsertOpts(QueueWebhook) }

// WebhookKickArgs is the wake-up webhook.Enqueuer adds to the
// application's transaction (WebhookKick), so an event leaves without
// waiting for the next tick. It drains exactly like a tick.
type WebhookKickArgs struct{}

// Kind is the River job kind.
func (WebhookKickArgs) Kind() string { return "postbox_webhook_kick" }

// InsertOpts puts kicks on the webhook queue and makes them unique, so a
// burst of enqueues leaves one pending kick.
func (WebhookKickArgs) InsertOpts() river.InsertOpts { return triggerInsertOpts(QueueWebhook) }

// WebhookRetryArgs is the periodic retry pass (ADR-072 decision 7): it
// claims due pending deliveries and attempts them again. Only the leader
// inserts it, and it is unique, so at most one pass runs at a time; the
// claim lease alone would keep concurrent passes correct, the gating makes
// the lease's sizing non-critical.
type WebhookRetryArgs struct{}

// Kind is the River job kind.
func (WebhookRetryArgs) Kind() string { return "postbox_webhook_retry" }

// InsertOpts puts retry passes on the webhook queue, one waiting or
// running at a time.
func (WebhookRetryArgs) InsertOpts() river.InsertOpts { return triggerInsertOpts(QueueWebhook) }

// WebhookPeriodicJobs are the webhook tick, the retry pass and the outbox
// prune, for river.Config.PeriodicJobs on every client that may become
// leader (only the leader inserts them). Each runs on start, so a new
// leader acts at once. An interval ≤ 0 means its default.
func WebhookPeriodicJobs(tickInterval, pruneInterval time.Duration) []*river.PeriodicJob {
	if tickInterval <= 0 {
		tickInterval = DefaultWebhookTickInterval
	}
	if pruneInterval <= 0 {
		pruneInterval = DefaultWebhookPruneInterval
	}
	return []*river.PeriodicJob{
		periodicJob(tickInterval, WebhookTickArgs{}),
		periodicJob(tickInterval, WebhookRetryArgs{}),
		periodicJob(pruneInterval, WebhookPruneArgs{}),
	}
}

// WebhookKick returns the webhook.KickFunc that inserts a unique
// WebhookKickArgs job in the enqueueing transaction; the job becomes
// visible when that transaction commits. Use it as webhook.Enqueuer.Kick.
//
// A unique insert waits for another uncommitted transaction that inserted
// the same pending kick, so concurrent enqueueing transactions serialise
// on it until the first commits: enqueue last and commit promptly, or
// leave Kick unset and rely on the tick.
func WebhookKick(client *river.Client[pgx.Tx]) webhook.KickFunc {
	return kickFunc(client, WebhookKickArgs{})
}

// webhookRun is the work shared by the webhook workers. It never writes a
// row's status: only the pipeline's claims and marks do.
type webhookRun struct {
	pipeline *webhook.Pipeline
	logger   *slog.Logger
}

func (w *webhookRun) drain(ctx context.Context, trigger string) error {
	sum, err := w.pipeline.Drain(ctx)
	w.log(ctx, "webhook drain", trigger, sum, err)
	if err != nil {
		return fmt.Errorf("webhook drain: %w", err)
	}
	return nil
}

func (w *webhookRun) retry(ctx context.Context) error {
	sum, err := w.pipeline.Retry(ctx)
	w.log(ctx, "webhook retry pass", "retry", sum, err)
	if err != nil {
		return fmt.Errorf("webhook retry pass: %w", err)
	}
	return nil
}

func (w *webhookRun) log(ctx context.Context, msg, trigger string, s webhook.Summary, err error) {
	if s.Claimed == 0 && err == nil {
		return
	}
	attrs := []any{"trigger", trigger, "claimed", s.Claimed, "dispatched", s.Dispatched, "succeeded", s.Succeeded,
		"retrying", s.Retrying, "failed", s.Failed, "deferred", s.Deferred, "stale_marks", s.Stale}
	if err != nil {
		w.logger.ErrorContext(ctx, msg, append(attrs, "error", err.Error())...)
		return
	}
	w.logger.InfoContext(ctx, msg, attrs...)
}

// WebhookTickWorker works WebhookTickArgs: it drains webhook_outbox.
type WebhookTickWorker struct {
	river.WorkerDefaults[WebhookTickArgs]
	run *webhookRun
}

// Work drains.
func (w *WebhookTickWorker) Work(ctx context.Context, _ *river.Job[WebhookTickArgs]) error {
	return w.run.drain(ctx, "tick")
}

// Timeout is the pipeline's JobTimeout, derived from its leases.
func (w *WebhookTickWorker) Timeout(*river.Job[WebhookTickArgs]) time.Duration {
	return w.run.pipeline.JobTimeout()
}

// WebhookKickWorker works WebhookKickArgs: it drains exactly like a tick.
type WebhookKickWorker struct {
	river.WorkerDefaults[WebhookKickArgs]
	run *webhookRun
}

// Work drains.
func (w *WebhookKickWorker) Work(ctx context.Context, _ *river.Job[WebhookKickArgs]) error {
	return w.run.drain(ctx, "kick")
}

// Timeout is the pipeline's JobTimeout, derived from its leases.
func (w *WebhookKickWorker) Timeout(*river.Job[WebhookKickArgs]) time.Duration {
	return w.run.pipeline.JobTimeout()
}

// WebhookRetryWorker works WebhookRetryArgs: one retry pass.
type WebhookRetryWorker struct {
	river.WorkerDefaults[WebhookRetryArgs]
	run *webhookRun
}

// Work runs a retry pass.
func (w *WebhookRetryWorker) Work(ctx context.Context, _ *river.Job[WebhookRetryArgs]) error {
	return w.run.retry(ctx)
}

// Timeout is the pipeline's JobTimeout, derived from its leases.
func (w *WebhookRetryWorker) Timeout(*river.Job[WebhookRetryArgs]) time.Duration {
	return w.run.pipeline.JobTimeout()
}

// WebhookWorkersConfig configures AddWebhookWorkers.
type WebhookWorkersConfig struct {
	// Logger gets one line per drain or retry pass that did something;
	// nil means slog.Default().
	Logger *slog.Logger
}

// AddWebhookWorkers registers the tick, kick, retry and prune workers over
// one pipeline. The client also needs QueueWebhook and QueueMaintenance in
// its Queues and WebhookPeriodicJobs in its PeriodicJobs.
func AddWebhookWorkers(workers *river.Workers, p *webhook.Pipeline, cfg WebhookWorkersConfig) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	run := &webhookRun{pipeline: p, logger: cfg.Logger}
	river.AddWorker(workers, &WebhookTickWorker{run: run})
	river.AddWorker(workers, &WebhookKickWorker{run: run})
	river.AddWorker(workers, &WebhookRetryWorker{run: run})
	river.AddWorker(workers, &WebhookPruneWorker{run: run})
}
