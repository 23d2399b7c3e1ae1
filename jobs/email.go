package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/outbox"
)

// Email transport defaults.
const (
	// DefaultEmailTickInterval is how often the leader inserts an email
	// tick. A tick that finds nothing due costs one claim query.
	DefaultEmailTickInterval = time.Second

	// DefaultEmailDrainWindow is how long one tick or kick keeps claiming
	// new batches while rows stay due. Bounding it hands the drain back to
	// River regularly (so a stop or a leadership change takes effect);
	// the next tick picks up where it left off.
	DefaultEmailDrainWindow = 30 * time.Second
)

// EmailTickArgs is the periodic email tick: it drains email_outbox.
type EmailTickArgs struct{}

// Kind is the River job kind.
func (EmailTickArgs) Kind() string { return "postbox_email_tick" }

// InsertOpts puts ticks on the email queue and keeps at most one waiting
// or running (see drainInsertOpts).
func (EmailTickArgs) InsertOpts() river.InsertOpts { return triggerInsertOpts(QueueEmail) }

// EmailKickArgs is the wake-up an Enqueue adds to the application's
// transaction (EmailKick), so a new email leaves without waiting for the
// next tick. It drains exactly like a tick.
type EmailKickArgs struct{}

// Kind is the River job kind.
func (EmailKickArgs) Kind() string { return "postbox_email_kick" }

// InsertOpts puts kicks on the email queue and makes them unique, so a
// burst of enqueues leaves one pending kick (see drainInsertOpts).
func (EmailKickArgs) InsertOpts() river.InsertOpts { return triggerInsertOpts(QueueEmail) }

// EmailPeriodicJob is the periodic email tick, for river.Config.PeriodicJobs
// on every client that may become leader (only the leader inserts it). It
// runs on start, so a new leader drains at once; interval ≤ 0 means
// DefaultEmailTickInterval.
func EmailPeriodicJob(interval time.Duration) *river.PeriodicJob {
	if interval <= 0 {
		interval = DefaultEmailTickInterval
	}
	return periodicJob(interval, EmailTickArgs{})
}

// EmailKick returns the outbox.KickFunc that inserts a unique EmailKickArgs
// job in the enqueueing transaction; the job becomes visible when that
// transaction commits. Use it as outbox.Enqueuer.Kick.
//
// A unique insert waits for another uncommitted transaction that inserted
// the same pending kick, so concurrent enqueueing transactions serialise
// on it until the first commits: enqueue last and commit promptly, or
// leave Kick unset and rely on the tick.
func EmailKick(client *river.Client[pgx.Tx]) outbox.KickFunc {
	return kickFunc(client, EmailKickArgs{})
}

// EmailJobTimeout is the River timeout of a tick or kick: the drain window,
// plus a whole BatchTimeout for the batch that may start as the window
// ends, plus LeaseSlack for its detached marks and releases. River never
// cuts a batch short; and should it ever, the marks are detached and the
// leases still hold.
func EmailJobTimeout(cfg leases.Config, window time.Duration) time.Duration {
	return window + cfg.BatchTimeout + cfg.LeaseSlack
}

// emailDrain is the work shared by ticks and kicks. It never writes a
// row's status: only the dispatcher's claim and marks do.
type emailDrain struct {
	dispatcher *outbox.Dispatcher
	window     time.Duration
	logger     *slog.Logger
}

func (e *emailDrain) work(ctx context.Context, trigger string) error {
	res, err := e.dispatcher.Drain(ctx, e.window)
	if res.Claimed > 0 || err != nil {
		e.logger.InfoContext(ctx, "email drain", "trigger", trigger, "batches", res.Batches, "claimed", res.Claimed,
			"sent", res.Sent, "skipped", res.Skipped, "failed", res.Failed, "retried", res.Retried,
			"released", res.Released, "stale_marks", res.StaleMarks, "mark_errors", res.MarkErrors)
	}
	if err != nil {
		return fmt.Errorf("email drain: %w", err)
	}
	return nil
}

func (e *emailDrain) timeout() time.Duration {
	return EmailJobTimeout(e.dispatcher.Leases(), e.window)
}

// EmailTickWorker works EmailTickArgs: it drains the email outbox.
type EmailTickWorker struct {
	river.WorkerDefaults[EmailTickArgs]
	drain *emailDrain
}

// Work drains.
func (w *EmailTickWorker) Work(ctx context.Context, _ *river.Job[EmailTickArgs]) error {
	return w.drain.work(ctx, "tick")
}

// Timeout is EmailJobTimeout of the dispatcher's leases and the window.
func (w *EmailTickWorker) Timeout(*river.Job[EmailTickArgs]) time.Duration { return w.drain.timeout() }

// EmailKickWorker works EmailKickArgs: it drains exactly like a tick.
type EmailKickWorker struct {
	river.WorkerDefaults[EmailKickArgs]
	drain *emailDrain
}

// Work drains.
func (w *EmailKickWorker) Work(ctx context.Context, _ *river.Job[EmailKickArgs]) error {
	return w.drain.work(ctx, "kick")
}

// Timeout is EmailJobTimeout of the dispatcher's leases and the window.
func (w *EmailKickWorker) Timeout(*river.Job[EmailKickArgs]) time.Duration { return w.drain.timeout() }

// EmailWorkersConfig configures AddEmailWorkers.
type EmailWorkersConfig struct {
	// DrainWindow bounds how long one job keeps claiming batches; 0 means
	// DefaultEmailDrainWindow.
	DrainWindow time.Duration
	// Logger gets one line per drain that did something; nil means
	// slog.Default().
	Logger *slog.Logger
}

// NewEmailWorkers returns the tick and kick workers over one dispatcher.
func NewEmailWorkers(d *outbox.Dispatcher, cfg EmailWorkersConfig) (*EmailTickWorker, *EmailKickWorker) {
	if cfg.DrainWindow <= 0 {
		cfg.DrainWindow = DefaultEmailDrainWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	drain := &emailDrain{dispatcher: d, window: cfg.DrainWindow, logger: cfg.Logger}
	return &EmailTickWorker{drain: drain}, &EmailKickWorker{drain: drain}
}

// AddEmailWorkers registers the tick and kick workers with workers. The
// client also needs QueueEmail in its Queues and EmailPeriodicJob in its
// PeriodicJobs.
func AddEmailWorkers(workers *river.Workers, d *outbox.Dispatcher, cfg EmailWorkersConfig) {
	tick, kick := NewEmailWorkers(d, cfg)
	river.AddWorker(workers, tick)
	river.AddWorker(workers, kick)
}
