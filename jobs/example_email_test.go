package jobs_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/postbox/postbox/jobs"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// Wire the email outbox to River: a periodic tick on the leader, tick and
// kick workers on every replica, and a graceful shutdown that stops
// claiming before River stops.
func ExampleAddEmailWorkers() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	smtpCfg, err := smtp.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		panic(err)
	}
	mailer, err := smtp.New(smtpCfg, logger)
	if err != nil {
		panic(err)
	}
	defer mailer.Close()
	leaseCfg, err := leases.Load(os.LookupEnv)
	if err != nil {
		panic(err)
	}

	dispatcher, err := outbox.NewDispatcher(pool, outbox.Config{Sender: mailer, Leases: leaseCfg, Logger: logger})
	if err != nil {
		panic(err)
	}
	workers := river.NewWorkers()
	jobs.AddEmailWorkers(workers, dispatcher, jobs.EmailWorkersConfig{Logger: logger})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:       map[string]river.QueueConfig{jobs.QueueEmail: {MaxWorkers: 4}},
		Workers:      workers,
		PeriodicJobs: []*river.PeriodicJob{jobs.EmailPeriodicJob(jobs.DefaultEmailTickInterval)},
		Logger:       logger,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}

	// Applications enqueue with a kick, so an email leaves at once.
	enqueuer := &outbox.Enqueuer{Kick: jobs.EmailKick(client)}
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := enqueuer.Enqueue(ctx, tx, outbox.Email{Payload: outbox.Payload{
			To: "ada@example.com", Subject: "Welcome", Text: "Hello!",
		}})
		return err
	})

	<-ctx.Done()
	dispatcher.Stop() // claim nothing new; rows in flight finish and mark
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)
}
