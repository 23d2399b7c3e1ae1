package jobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/jobs"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
	"github.com/postbox/postbox/webhook"
)

// Example wires postbox into a River client the way `worker run` does:
// each replica runs shifts of the email and webhook lanes on a queue of
// its own, woken by the outbox tables' insert triggers; the leader inserts
// the gated webhook retry pass and the pruner on the maintenance queue.
// An email enqueued by the application is then sent by a shift.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// In real code: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), on a
	// database migrated by `worker migrate up`.
	pool := pgtest.ExamplePool()
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// A local relay for the example; in production smtp.ConfigFromEnv.
	sink, err := smtpsink.Start(smtpsink.Options{})
	if err != nil {
		panic(err)
	}
	defer sink.Close()
	mailer, err := smtp.New(smtp.Config{Host: sink.Host(), Port: sink.Port(), Mode: smtp.ModeNone}, logger)
	if err != nil {
		panic(err)
	}
	defer mailer.Close()

	waker := jobs.NewWaker(pool, logger) // one LISTEN connection per process
	go waker.Listen(ctx)
	dispatcher, err := outbox.NewDispatcher(pool, outbox.Config{Sender: mailer, Wake: waker.Email, Logger: logger})
	if err != nil {
		panic(err)
	}
	pipeline, err := webhook.NewDispatcher(pool, webhook.Config{Wake: waker.Webhook, Logger: logger})
	if err != nil {
		panic(err)
	}
	defer pipeline.Close()

	const replica = "worker-1.example.com-42" // in real code: host-pid
	shifts := jobs.NewShifts(jobs.ShiftsConfig{
		Replica: replica,
		Queue:   jobs.ReplicaQueue("worker-1.example.com", 42),
		Lanes: map[string]jobs.Lane{
			jobs.LaneEmail:   jobs.EmailLane(dispatcher),
			jobs.LaneWebhook: jobs.WebhookLane(pipeline),
		},
		Logger: logger,
	})
	passes := jobs.NewPasses(pipeline, pool, jobs.PassesConfig{Owner: replica, Logger: logger})
	workers := river.NewWorkers()
	shifts.AddWorkers(workers)
	passes.AddWorkers(workers)
	queue, queueConfig := shifts.Queue()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:     replica,
		Logger: logger,
		Queues: map[string]river.QueueConfig{
			queue:                 queueConfig,
			jobs.QueueMaintenance: {MaxWorkers: 2},
		},
		Workers:      workers,
		PeriodicJobs: passes.PeriodicJobs(),
		// Jobs time out by the leases; River must not rescue one sooner.
		RescueStuckJobsAfter: max(shifts.Timeout(), passes.Timeout()) + dispatcher.Leases().LeaseSlack,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("shifts on queue", queue, "passes on queue", jobs.QueueMaintenance)
	fmt.Println("job kinds:", jobs.ShiftArgs{}.Kind(), jobs.RetryPassArgs{}.Kind(), jobs.PruneArgs{}.Kind())

	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	go shifts.Keep(ctx, client) // inserts each lane's first shift

	// The application enqueues; a shift sends.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Enqueue(ctx, tx, outbox.Email{Payload: outbox.Payload{
			To: "ada@example.com", Subject: "Welcome", Text: "Hello Ada.",
		}})
		return err
	})
	if err != nil {
		panic(err)
	}
	waitCtx, stopWaiting := context.WithTimeout(ctx, time.Minute)
	defer stopWaiting()
	if err := sink.WaitFor(waitCtx, 1); err != nil {
		panic(err)
	}
	fmt.Println("relay received:", sink.Len())

	// The soft stop of `worker run`: no successor shifts, the lanes wind
	// down, River waits for the running jobs, which record their output.
	shifts.Stop()
	dispatcher.Stop()
	pipeline.Stop()
	if err := client.Stop(ctx); err != nil {
		panic(err)
	}
	var sent int
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum((metadata->'output'->>'sent')::int), 0) FROM river_job
WHERE kind = $1 AND args->>'lane' = $2 AND state = 'completed'`, jobs.ShiftArgs{}.Kind(), jobs.LaneEmail).Scan(&sent); err != nil {
		panic(err)
	}
	fmt.Println("sent, by the email shifts' recorded output:", sent)
	// Output:
	// shifts on queue postbox_r_worker_1_example_com_42 passes on queue postbox_maintenance
	// job kinds: postbox_shift postbox_webhook_retry postbox_webhook_prune
	// relay received: 1
	// sent, by the email shifts' recorded output: 1
}
