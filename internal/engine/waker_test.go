package engine_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The insert trigger notifies at most one transaction per table and 10 ms
// slot, and never makes an inserting transaction wait for another: two
// transactions that insert back to back, the first still open, both
// insert at once, and mostly only the first notifies. Notifying from every
// transaction would serialise the application's commits (a notifying
// commit holds a cluster-wide lock through its WAL flush).
func TestWakeTrigger_RateLimitedAndNeverWaits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+engine.WakeChannel); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO email_outbox (payload) VALUES ('{"to":"a@example.com","subject":"s","text":"t"}')`
	const rounds = 20
	skipped := 0
	for range rounds {
		tx1, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx2, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx1.Exec(ctx, insert); err != nil {
			t.Fatal(err)
		}
		// tx1 holds its slot's lock until it commits; tx2 must not wait.
		if _, err := tx2.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx2.Exec(ctx, insert); err != nil {
			t.Fatalf("the second inserting transaction waited on the first: %v", err)
		}
		if err := tx1.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx2.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			note, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				break
			}
			if note.Payload != "email_outbox" {
				t.Fatalf("notification payload %q, want the table", note.Payload)
			}
			n++
		}
		switch n {
		case 0:
			t.Fatal("two committed inserts, no wake-up")
		case 1:
			skipped++
		}
	}
	if skipped == 0 {
		t.Errorf("every one of %d transaction pairs notified twice: the wake-up is not rate-limited", rounds)
	}
}

// A Waker turns notifications into wake-ups for the Lanes of the table
// named, and wakes every Lane when it (re)connects.
func TestWaker_WakesSubscribersOfTheTable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	w := engine.NewWaker(func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	}, slog.New(slog.DiscardHandler))
	email, hooks := w.Subscribe("email_outbox"), w.Subscribe("webhook_outbox")
	go func() { _ = w.Listen(ctx) }()
	<-w.Listening()
	<-email // the connect wakes everyone once
	<-hooks
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{}')`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hooks:
	case <-ctx.Done():
		t.Fatal("no wake-up for the webhook lane")
	}
	select {
	case <-email:
		t.Fatal("a webhook_outbox insert woke the email lane")
	case <-time.After(100 * time.Millisecond):
	}
}
