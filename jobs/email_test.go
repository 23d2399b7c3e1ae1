package jobs

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"

	"github.com/postbox/postbox/internal/pgtest"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// emailTestCtx bounds a test; it leaves more than a default PerRowBudget,
// which the dispatcher needs before it starts a row.
func emailTestCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// recordingSender accepts every message and remembers it.
type recordingSender struct {
	mu   sync.Mutex
	sent []smtp.Message
}

func (s *recordingSender) Send(_ context.Context, msg smtp.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, msg)
	return nil
}

func (s *recordingSender) rowIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(s.sent))
	for i, m := range s.sent {
		ids[i] = m.RowID
	}
	slices.Sort(ids)
	return ids
}

func newEmailDispatcher(t *testing.T, pool *pgxpool.Pool, sender outbox.Sender) *outbox.Dispatcher {
	t.Helper()
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: sender, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// insertEmail writes a row by plain SQL, as any language may.
func insertEmail(t *testing.T, ctx context.Context, pool *pgxpool.Pool, to string) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{"to": to, "subject": "Hello from SQL", "text": "Plain INSERT works."})
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload) VALUES ('raw', 'cus_1', $1)
RETURNING id::text`, payload).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func emailStatus(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) string {
	t.Helper()
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM email_outbox WHERE id = $1`, id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	return status
}

// Ticks and kicks go to the email queue, are never retried by River (the
// next tick is the retry), and are unique among waiting and running jobs
// only: River's default would count completed jobs too and block new
// ticks for a day.
func TestEmailArgs_InsertOpts(t *testing.T) {
	t.Parallel()
	for _, args := range []interface {
		river.JobArgs
		InsertOpts() river.InsertOpts
	}{EmailTickArgs{}, EmailKickArgs{}} {
		t.Run(args.Kind(), func(t *testing.T) {
			t.Parallel()
			opts := args.InsertOpts()
			if opts.Queue != QueueEmail || opts.MaxAttempts != 1 {
				t.Errorf("queue %q, max attempts %d; want %q and 1", opts.Queue, opts.MaxAttempts, QueueEmail)
			}
			for _, must := range []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending,
				rivertype.JobStateRunning, rivertype.JobStateScheduled} {
				if !slices.Contains(opts.UniqueOpts.ByState, must) {
					t.Errorf("unique states %v lack %s, which River requires", opts.UniqueOpts.ByState, must)
				}
			}
			for _, mustNot := range []rivertype.JobState{rivertype.JobStateCompleted, rivertype.JobStateRetryable} {
				if slices.Contains(opts.UniqueOpts.ByState, mustNot) {
					t.Errorf("unique states %v include %s: a finished tick would block the next", opts.UniqueOpts.ByState, mustNot)
				}
			}
		})
	}
}

// A burst of enqueues, each in its own transaction, leaves one pending
// kick job: the kick is unique.
func TestEmailKick_BurstLeavesOnePendingKick(t *testing.T) {
	t.Parallel()
	ctx := emailTestCtx(t)
	pool := pgtest.NewPool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: testLogger(t)}) // insert-only
	if err != nil {
		t.Fatal(err)
	}
	enqueuer := &outbox.Enqueuer{Kick: EmailKick(client)}
	for i := range 5 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := enqueuer.Enqueue(ctx, tx, outbox.Email{Payload: outbox.Payload{
				To: "ada@example.com", Subject: "Burst", Text: "message " + string(rune('a'+i)),
			}})
			return err
		})
		if err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	var emails, kicks int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM email_outbox),
	(SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'available' AND queue = $2)`,
		EmailKickArgs{}.Kind(), QueueEmail).Scan(&emails, &kicks); err != nil {
		t.Fatal(err)
	}
	if emails != 5 || kicks != 1 {
		t.Fatalf("%d emails and %d pending kicks, want 5 and 1", emails, kicks)
	}
	rivertest.RequireInserted(ctx, t, riverpgxv5.New(pool), &EmailKickArgs{}, &rivertest.RequireInsertedOpts{
		Queue: QueueEmail, MaxAttempts: 1,
	})
}

// The job timeout covers the drain window plus a whole batch plus the lease
// slack, under any valid lease figures, so River never cuts a batch short;
// and it stays below River's stuck-job rescue (1 h), so a live drain is
// never rescued and run twice.
func TestEmailJobTimeout_NeverCutsABatchShort(t *testing.T) {
	t.Parallel()
	override := leases.Default()
	override.BatchSize, override.BatchTimeout = 4, 250*time.Second
	for _, tc := range []struct {
		name   string
		cfg    leases.Config
		window time.Duration
	}{
		{"defaults", leases.Default(), DefaultEmailDrainWindow},
		{"overridden leases", override, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			got := EmailJobTimeout(tc.cfg, tc.window)
			worstBatch := time.Duration(tc.cfg.BatchSize) * tc.cfg.PerRowBudget
			if need := tc.window + max(tc.cfg.BatchTimeout, worstBatch) + leases.MarkTimeout; got < need {
				t.Errorf("timeout %s < window %s + batch %s + mark %s", got, tc.window, tc.cfg.BatchTimeout, leases.MarkTimeout)
			}
			if got >= time.Hour {
				t.Errorf("timeout %s reaches River's default stuck-job rescue (1h)", got)
			}
		})
	}

	d, err := outbox.NewDispatcher(noDB{}, outbox.Config{Sender: &recordingSender{}})
	if err != nil {
		t.Fatal(err)
	}
	tick, kick := NewEmailWorkers(d, EmailWorkersConfig{})
	want := EmailJobTimeout(leases.Default(), DefaultEmailDrainWindow)
	if got := tick.Timeout(nil); got != want {
		t.Errorf("tick worker timeout %s, want %s", got, want)
	}
	if got := kick.Timeout(nil); got != want {
		t.Errorf("kick worker timeout %s, want %s", got, want)
	}
}

// noDB stands in for a pool where no query is made.
type noDB struct{ outbox.DB }

// The tick worker drains every due row through the dispatcher; the job
// itself writes no row status.
func TestEmailTickWorker_DrainsDueRows(t *testing.T) {
	t.Parallel()
	ctx := emailTestCtx(t)
	pool := pgtest.NewPool(t)
	var ids []string
	for range 7 {
		ids = append(ids, insertEmail(t, ctx, pool, "ada@example.com"))
	}
	slices.Sort(ids)
	sender := &recordingSender{}
	tick, kick := NewEmailWorkers(newEmailDispatcher(t, pool, sender), EmailWorkersConfig{Logger: testLogger(t)})

	driver := riverpgxv5.New(pool)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the job row is test scaffolding
	res, err := rivertest.NewWorker(t, driver, &river.Config{}, tick).Work(ctx, t, tx, EmailTickArgs{}, nil)
	if err != nil || res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("tick: %v, %v", res, err)
	}
	if got := sender.rowIDs(); !slices.Equal(got, ids) {
		t.Fatalf("tick sent %v, want every due row %v", got, ids)
	}
	for _, id := range ids {
		if s := emailStatus(t, ctx, pool, id); s != "dispatched" {
			t.Errorf("row %s is %s, want dispatched", id, s)
		}
	}
	// A kick drains the same way; nothing is due any more.
	if res, err := rivertest.NewWorker(t, driver, &river.Config{}, kick).Work(ctx, t, tx, EmailKickArgs{}, nil); err != nil ||
		res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("kick: %v, %v", res, err)
	}
	if n := len(sender.rowIDs()); n != len(ids) {
		t.Errorf("the kick re-sent rows: %d sends, want %d", n, len(ids))
	}
}
