package jobs

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/postbox/postbox/internal/pgtest"
	"github.com/postbox/postbox/internal/smtpsink"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// e2e is a real pipeline: a River client working the email queue over a
// pgtest database, a dispatcher with the real SMTP mailer, and an
// in-process SMTP sink.
type e2e struct {
	pool   *pgxpool.Pool
	sink   *smtpsink.Sink
	client *river.Client[pgx.Tx]
}

func startE2E(t *testing.T, ctx context.Context, periodic []*river.PeriodicJob) *e2e {
	t.Helper()
	pool := pgtest.NewPool(t)
	sink, err := smtpsink.Start(smtpsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	mailer, err := smtp.New(smtp.Config{
		Host: sink.Host(), Port: sink.Port(), Mode: smtp.ModeNone, From: "billing@example.com", AppEnv: "test",
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mailer.Close() })

	dispatcher := newEmailDispatcher(t, pool, mailer)
	workers := river.NewWorkers()
	AddEmailWorkers(workers, dispatcher, EmailWorkersConfig{DrainWindow: time.Second, Logger: testLogger(t)})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{QueueEmail: {MaxWorkers: 4}},
		Workers:           workers,
		PeriodicJobs:      periodic,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		TestOnly:          true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Graceful shutdown order: stop claiming, then stop River.
		dispatcher.Stop()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			t.Errorf("stop River: %v", err)
		}
	})
	return &e2e{pool: pool, sink: sink, client: client}
}

// waitDelivered waits for the sink to accept the row's message and for the
// row to be marked dispatched, and checks it was sent exactly once.
func (e *e2e) waitDelivered(t *testing.T, ctx context.Context, id string) smtpsink.Received {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := e.sink.WaitFor(waitCtx, 1); err != nil {
		t.Fatalf("the sink received nothing: %v", err)
	}
	for emailStatus(t, ctx, e.pool, id) != "dispatched" {
		select {
		case <-waitCtx.Done():
			t.Fatalf("row %s was sent but never marked dispatched", id)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n := e.sink.CountByRowID()[id]; n != 1 {
		t.Errorf("row %s reached the sink %d times, want once", id, n)
	}
	return e.sink.Messages()[0]
}

// End to end: a plain SQL INSERT — no Go, no kick — is delivered to an SMTP
// server by the periodic River tick, and the row is marked dispatched.
func TestEmailEndToEnd_PlainInsertDeliveredByTick(t *testing.T) {
	t.Parallel()
	ctx := emailTestCtx(t)
	e := startE2E(t, ctx, []*river.PeriodicJob{EmailPeriodicJob(150 * time.Millisecond)})

	id := insertEmail(t, ctx, e.pool, "Ada Lovelace <ada@example.com>")
	got := e.waitDelivered(t, ctx, id)
	if got.RowID != id || got.Subject != "Hello from SQL" || len(got.To) != 1 || got.To[0] != "ada@example.com" {
		t.Errorf("sink received %+v, want row %s's email to ada@example.com", got, id)
	}
	if !strings.Contains(string(got.Data), "Plain INSERT works.") {
		t.Errorf("message body lacks the payload text:\n%s", got.Data)
	}
	var ticks int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1`, EmailTickArgs{}.Kind()).Scan(&ticks); err != nil {
		t.Fatal(err)
	}
	if ticks == 0 {
		t.Error("no tick job was inserted: the row was not delivered through the tick")
	}
}

// With a kick in the enqueueing transaction the email leaves at once,
// without any periodic tick configured.
func TestEmailEndToEnd_KickDeliversWithoutTick(t *testing.T) {
	t.Parallel()
	ctx := emailTestCtx(t)
	e := startE2E(t, ctx, nil)

	enqueuer := &outbox.Enqueuer{Kick: EmailKick(e.client)}
	var id string
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		id, err = enqueuer.Enqueue(ctx, tx, outbox.Email{
			Kind:       outbox.KindPasswordReset,
			CustomerID: "cus_1",
			Payload: outbox.Payload{To: "ada@example.com", Subject: "Reset your password",
				PasswordResetURL: "https://app.example.com/reset/t0k3n"},
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := e.waitDelivered(t, ctx, id)
	if got.Subject != "Reset your password" || !strings.Contains(string(got.Data), "https://app.example.com/reset/t0k3n") {
		t.Errorf("sink received %q without the reset link:\n%s", got.Subject, got.Data)
	}
	// Sent, so the single-use link is gone from the stored row.
	var hasLink bool
	if err := e.pool.QueryRow(ctx, `SELECT payload ? 'password_reset_url' FROM email_outbox WHERE id = $1`, id).Scan(&hasLink); err != nil {
		t.Fatal(err)
	}
	if hasLink {
		t.Error("the dispatched row still stores its password_reset_url")
	}
}
