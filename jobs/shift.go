package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// Shift defaults.
const (
	// DefaultShiftWindow is how long one shift claims. Shorter windows
	// make River's job list finer-grained, longer ones keep it smaller: at
	// a minute, each replica adds 1,440 shift rows a day per lane to
	// river_job (River keeps completed jobs 24 h).
	DefaultShiftWindow = time.Minute

	// shiftLead is how long before a shift's window ends its successor is
	// inserted, so the successor is fetched and claiming when the window
	// closes: the hand-over costs no gap.
	shiftLead = time.Second

	// PollOnlyFetch is River's FetchPollInterval for a client without a
	// notifier (river.Config.PollOnly), which finds new jobs only by
	// polling: a quarter of shiftLead, so a successor inserted shiftLead
	// before its predecessor's window closes is fetched and claiming in
	// time even if a poll or two comes late. Each poll is one fetch per
	// queue the client works.
	PollOnlyFetch = shiftLead / 4

	// keeperInterval is how often a replica checks that each of its lanes
	// has a shift waiting or running, and inserts one if not: after a
	// shift that errored before inserting its successor, or at start.
	keeperInterval = 5 * time.Second

	// orphanAfter is how long an available shift may wait before it counts
	// as the leftover of a replica that died: a live replica fetches its
	// own within milliseconds.
	orphanAfter = 2 * time.Minute
)

// The lanes a shift can run, by the table they drain.
const (
	LaneEmail   = "email_outbox"
	LaneWebhook = "webhook_outbox"
)

// ShiftArgs is one shift of one lane on one replica. Its args name the
// lane and the replica, so River UI says whose shift it was; its output
// (an outbox.Tally) says what it did.
type ShiftArgs struct {
	Lane    string `json:"lane"`
	Replica string `json:"replica"`
}

// Kind is the River job kind.
func (ShiftArgs) Kind() string { return "postbox_shift" }

// Lane is what a shift runs.
type Lane struct {
	// Run claims for window, then waits for what it started.
	Run func(ctx context.Context, window time.Duration) (outbox.Tally, error)
	// Timeout is the longest Run of window may take.
	Timeout func(window time.Duration) time.Duration
}

// EmailLane is the email dispatcher's lane.
func EmailLane(d *outbox.Dispatcher) Lane { return Lane{Run: d.Run, Timeout: d.RunTimeout} }

// WebhookLane is the webhook pipeline's outbox lane: fan-outs and first
// attempts. (Its retry lane runs in the gated retry pass.)
func WebhookLane(p *webhook.Dispatcher) Lane { return Lane{Run: p.Run, Timeout: p.RunTimeout} }

// Shifts runs one replica's lanes as River jobs on the replica's own
// queue.
type Shifts struct {
	replica string
	queue   string
	window  time.Duration
	lanes   map[string]Lane
	logger  *slog.Logger

	mu      sync.Mutex
	stopped bool
}

// ShiftsConfig configures NewShifts.
type ShiftsConfig struct {
	Replica string // the River client ID, for the job args
	Queue   string // ReplicaQueue of this replica
	Window  time.Duration
	Lanes   map[string]Lane
	Logger  *slog.Logger
}

// NewShifts returns the shifts of one replica.
func NewShifts(cfg ShiftsConfig) *Shifts {
	if cfg.Window <= 0 {
		cfg.Window = DefaultShiftWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Shifts{replica: cfg.Replica, queue: cfg.Queue, window: cfg.Window, lanes: cfg.Lanes, logger: cfg.Logger}
}

// Queue is the replica's queue config, for river.Config.Queues: two
// workers per lane, for a shift and its successor during the hand-over.
func (s *Shifts) Queue() (string, river.QueueConfig) {
	return s.queue, river.QueueConfig{MaxWorkers: 2 * len(s.lanes)}
}

// Timeout is the longest any shift may run, for RescueStuckJobsAfter.
func (s *Shifts) Timeout() time.Duration {
	var longest time.Duration
	for _, l := range s.lanes {
		longest = max(longest, l.Timeout(s.window))
	}
	return longest
}

// Stop makes shifts hand over to no successor: for shutdown, before the
// lanes stop.
func (s *Shifts) Stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

func (s *Shifts) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// AddWorkers registers the shift worker.
func (s *Shifts) AddWorkers(workers *river.Workers) {
	river.AddWorker(workers, &ShiftWorker{shifts: s})
}

// ShiftWorker works ShiftArgs.
type ShiftWorker struct {
	river.WorkerDefaults[ShiftArgs]
	shifts *Shifts
}

// Timeout is the lane's Timeout of the window.
func (w *ShiftWorker) Timeout(job *river.Job[ShiftArgs]) time.Duration {
	if l, ok := w.shifts.lanes[job.Args.Lane]; ok {
		return l.Timeout(w.shifts.window)
	}
	return time.Minute
}

// Work runs the lane for the window, inserting its successor shortly
// before the window ends, and records what it did.
func (w *ShiftWorker) Work(ctx context.Context, job *river.Job[ShiftArgs]) error {
	s := w.shifts
	lane, ok := s.lanes[job.Args.Lane]
	if !ok {
		return fmt.Errorf("shift: unknown lane %q (this replica runs %v)", job.Args.Lane, s.laneNames())
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	handover := time.AfterFunc(max(s.window-shiftLead, 0), func() {
		if !s.isStopped() {
			if err := s.insert(context.WithoutCancel(ctx), client, job.Args.Lane); err != nil {
				s.logger.Warn("inserting the next shift failed; the keeper inserts it", "lane", job.Args.Lane, "error", err.Error())
			}
		}
	})
	defer handover.Stop()

	t, err := lane.Run(ctx, s.window)
	if t.Busy() || err != nil {
		s.logger.InfoContext(ctx, "shift", "lane", job.Args.Lane, "claims", t.Claims, "claimed", t.Claimed,
			"sent", t.Sent, "failed", t.Failed, "retried", t.Retried, "released", t.Released, "stale", t.Stale, "panics", t.Panics)
	}
	if oerr := river.RecordOutput(ctx, shiftOutput(job.Args.Lane, t)); oerr != nil {
		err = errors.Join(err, oerr)
	}
	return errors.Join(err, t.Err())
}

// ConsolePrefix is where cmd/worker mounts the console (internal/operator/console):
// a shift's output links each row it names to the row's console page.
const ConsolePrefix = "/console"

// ShiftOutput is a shift's recorded output: its Tally, whose fields stay
// at the top level (sent_ids, failed_ids…), and the console pages of the
// rows those lists name, so River UI links back to each row's story.
type ShiftOutput struct {
	outbox.Tally
	Console *ConsoleLinks `json:"console,omitempty"`
}

// ConsoleLinks are console paths, on the server that serves River UI.
type ConsoleLinks struct {
	Sent   []string `json:"sent,omitempty"`
	Failed []string `json:"failed,omitempty"`
}

// shiftOutput adds the console links to t: an email row's page for the
// email lane; for the webhook lane, whose ids are deliveries (or, for a
// failed fan-out, webhook_outbox rows), the console's find page, which
// resolves either.
func shiftOutput(lane string, t outbox.Tally) ShiftOutput {
	out := ShiftOutput{Tally: t}
	if len(t.SentIDs) == 0 && len(t.FailedIDs) == 0 {
		return out
	}
	page := ConsolePrefix + "/find/"
	if lane == LaneEmail {
		page = ConsolePrefix + "/email/"
	}
	links := func(ids []string) []string {
		var l []string
		for _, id := range ids {
			l = append(l, page+id)
		}
		return l
	}
	out.Console = &ConsoleLinks{Sent: links(t.SentIDs), Failed: links(t.FailedIDs)}
	return out
}

func (s *Shifts) laneNames() []string {
	names := make([]string, 0, len(s.lanes))
	for n := range s.lanes {
		names = append(names, n)
	}
	return names
}

// insert adds a shift of lane to the replica's queue. One attempt: a
// failed shift needs no retry of its own — its successor is the retry.
func (s *Shifts) insert(ctx context.Context, client *river.Client[pgx.Tx], lane string) error {
	_, err := client.Insert(ctx, ShiftArgs{Lane: lane, Replica: s.replica}, &river.InsertOpts{Queue: s.queue, MaxAttempts: 1})
	return err
}

// Keep inserts the first shift of every lane, then every keeperInterval
// inserts one for any lane that has none waiting or running, and deletes
// shifts left waiting in dead replicas' queues. It returns when ctx ends.
// It reads and deletes River's jobs through River's API (JobList,
// JobDeleteMany), not its tables.
func (s *Shifts) Keep(ctx context.Context, client *river.Client[pgx.Tx]) {
	ticker := time.NewTicker(keeperInterval)
	defer ticker.Stop()
	for {
		s.keepOnce(ctx, client)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (s *Shifts) keepOnce(ctx context.Context, client *river.Client[pgx.Tx]) {
	defer func() {
		// Nothing River guards: a panic here must not end the process.
		if v := recover(); v != nil {
			s.logger.Error("shift keeper panicked; it tries again", "panic", fmt.Sprint(v))
		}
	}()
	if s.isStopped() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, keeperInterval)
	defer cancel()
	for lane := range s.lanes {
		res, err := client.JobList(ctx, river.NewJobListParams().Queues(s.queue).Kinds(ShiftArgs{}.Kind()).
			States(rivertype.JobStateAvailable, rivertype.JobStateRunning, rivertype.JobStateScheduled,
				rivertype.JobStatePending, rivertype.JobStateRetryable).
			Where("args->>'lane' = @lane", river.NamedArgs{"lane": lane}).First(1))
		if err != nil {
			s.logger.Warn("shift keeper: checking the lane's shift failed", "lane", lane, "error", err.Error())
			continue
		}
		if len(res.Jobs) == 0 {
			if err := s.insert(ctx, client, lane); err != nil {
				s.logger.Warn("shift keeper: inserting a shift failed", "lane", lane, "error", err.Error())
			}
		}
	}
	// A dead replica's waiting shifts: available in a queue no live
	// replica fetches, long past their time.
	gone, err := client.JobDeleteMany(ctx, river.NewJobDeleteManyParams().Kinds(ShiftArgs{}.Kind()).
		States(rivertype.JobStateAvailable).
		Where("queue <> @queue AND scheduled_at < now() - @after::interval", river.NamedArgs{"queue": s.queue, "after": orphanAfter}))
	reaped := 0
	if gone != nil {
		reaped = len(gone.Jobs)
	}
	if err != nil {
		s.logger.Warn("shift keeper: deleting dead replicas' shifts failed", "error", err.Error())
	} else if reaped > 0 {
		s.logger.Info("deleted shifts left by replicas that stopped", "shifts", reaped)
	}
}
