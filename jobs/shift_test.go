package jobs

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
	"github.com/postbox/postbox/webhook"
)

var discard = slog.New(slog.DiscardHandler)

// replica is a River client wired as `worker run` wires it: shifts of the
// email lane on its own queue, the keeper, the gated passes.
type replica struct {
	client *river.Client[pgx.Tx]
	shifts *Shifts
}

func startReplica(t *testing.T, pool *pgxpool.Pool, name string, sender outbox.Sender, window time.Duration) *replica {
	t.Helper()
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: sender, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	p, err := webhook.NewDispatcher(pool, webhook.Config{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	shifts := NewShifts(ShiftsConfig{
		Replica: name, Queue: ReplicaQueue(name, 1), Window: window,
		Lanes:  map[string]Lane{LaneEmail: EmailLane(d)},
		Logger: discard,
	})
	passes := NewPasses(p, pool, PassesConfig{Owner: name, Logger: discard})
	workers := river.NewWorkers()
	shifts.AddWorkers(workers)
	passes.AddWorkers(workers)
	queue, qc := shifts.Queue()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: discard, Workers: workers, Queues: map[string]river.QueueConfig{queue: qc},
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go shifts.Keep(ctx, client)
	t.Cleanup(func() {
		shifts.Stop()
		d.Stop()
		stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		_ = client.Stop(stopCtx)
		cancel()
	})
	return &replica{client: client, shifts: shifts}
}

func insertEmails(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO email_outbox (payload)
		SELECT jsonb_build_object('to', 'u' || i || '@example.com', 'subject', 's', 'text', 't') FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
}

// jobsWait bounds a wait for what running jobs must do: a hang, not a
// speed.
const jobsWait = time.Minute

func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A replica's keeper starts its lane's first shift; the shift sends what is
// due, hands over to its successor, and records what it did as its River
// job output, so River UI answers "what did this shift do?".
func TestShift_DrainsHandsOverAndRecordsItsOutput(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var sent atomic.Int32
	sender := outbox.SenderFunc(func(context.Context, smtp.Message) error { sent.Add(1); return nil })
	startReplica(t, pool, "host-a", sender, 500*time.Millisecond)
	insertEmails(t, pool, 7)
	eventually.Until(t, "7 emails sent", jobsWait, func() bool { return sent.Load() == 7 })
	eventually.Until(t, "a completed shift with output", jobsWait, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM river_job WHERE kind = 'postbox_shift' AND state = 'completed'
			AND metadata ? 'output'`) > 0
	})
	var outputs []json.RawMessage
	rows, err := pool.Query(context.Background(), `SELECT metadata->'output' FROM river_job
		WHERE kind = 'postbox_shift' AND state = 'completed' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	outputs, err = pgx.CollectRows(rows, pgx.RowTo[json.RawMessage])
	if err != nil {
		t.Fatal(err)
	}
	total := outbox.Tally{}
	for _, o := range outputs {
		var tl outbox.Tally
		if err := json.Unmarshal(o, &tl); err != nil {
			t.Fatalf("shift output %s: %v", o, err)
		}
		total.Add(tl)
	}
	// The sends may still be in a running shift; wait for the hand-over.
	eventually.Until(t, "the shifts' outputs add up to 7 sent", jobsWait, func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT coalesce(sum((metadata->'output'->>'sent')::int), 0) FROM river_job
			WHERE kind = 'postbox_shift' AND state = 'completed'`).Scan(&n)
		return n == 7
	})
	if live := scalar[int](t, pool, `SELECT count(*) FROM river_job WHERE kind = 'postbox_shift'
		AND state IN ('available', 'running')`); live < 1 {
		t.Errorf("%d shifts waiting or running after a hand-over, want the successor", live)
	}
	var args ShiftArgs
	if err := pool.QueryRow(context.Background(), `SELECT args FROM river_job WHERE kind = 'postbox_shift' LIMIT 1`).Scan(&args); err != nil {
		t.Fatal(err)
	}
	if args.Lane != LaneEmail || args.Replica != "host-a" {
		t.Errorf("shift args %+v, want the lane and the replica named", args)
	}
}

// A shift whose rows panicked records them, and its River job ends in
// error naming the panic, so River UI shows it; the replica keeps going.
func TestShift_PanicErrorsTheJobAndTheReplicaLivesOn(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var once sync.Once
	var sent atomic.Int32
	sender := outbox.SenderFunc(func(context.Context, smtp.Message) error {
		once.Do(func() { panic("relay client exploded") })
		sent.Add(1)
		return nil
	})
	startReplica(t, pool, "host-b", sender, 300*time.Millisecond)
	insertEmails(t, pool, 3)
	eventually.Until(t, "an errored shift", jobsWait, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM river_job WHERE kind = 'postbox_shift' AND state = 'discarded'`) == 1
	})
	errs := scalar[string](t, pool, `SELECT errors::text FROM river_job WHERE kind = 'postbox_shift' AND state = 'discarded'`)
	if !strings.Contains(errs, "relay client exploded") {
		t.Errorf("errored shift's errors %s, want the panic value", errs)
	}
	if got := sent.Load(); got != 2 {
		t.Errorf("%d sent beside the panicking row, want 2", got)
	}
	// The replica lives on: the next shift sends new rows.
	insertEmails(t, pool, 1)
	eventually.Until(t, "a row sent after the panic", jobsWait, func() bool { return sent.Load() == 3 })
}

// A shift left available in the queue of a replica that died is deleted by
// a live replica's keeper, so dead replicas leave nothing behind.
func TestKeeper_DeletesDeadReplicasShifts(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO river_job (kind, args, queue, state, scheduled_at, max_attempts, priority)
		VALUES ('postbox_shift', '{"lane":"email_outbox","replica":"gone"}', 'postbox_r_gone_1', 'available', now() - interval '1 hour', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	startReplica(t, pool, "host-c", outbox.SenderFunc(func(context.Context, smtp.Message) error { return nil }), time.Minute)
	eventually.Until(t, "the dead replica's shift deleted", jobsWait, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM river_job WHERE queue = 'postbox_r_gone_1'`) == 0
	})
}

func TestReplicaQueue_ValidRiverNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host string
		pid  int
		want string
	}{
		{"worker-7f9c", 42, "postbox_r_worker_7f9c_42"},
		{"Web.Example.COM", 1, "postbox_r_web_example_com_1"},
		{"--", 9, "postbox_r_host_9"},
		{strings.Repeat("a", 100), 123456, "postbox_r_" + strings.Repeat("a", 64-len("postbox_r_")-len("_123456")) + "_123456"},
	} {
		if got := ReplicaQueue(tc.host, tc.pid); got != tc.want || len(got) > 64 {
			t.Errorf("ReplicaQueue(%q, %d) = %q, want %q", tc.host, tc.pid, got, tc.want)
		}
	}
}
