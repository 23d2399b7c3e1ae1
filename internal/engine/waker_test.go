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

// The insert trigger lets at most two transactions per table and 10 ms
// slot's time notify — the slot's, and one that found it taken and took
// the next (TestWake_ATakenSlotNotifiesForTheNext) — and never makes an
// inserting transaction wait for another: three transactions that insert
// back to back, the first two still open, all insert at once, and when
// all three ran in one slot the third does not notify. Notifying from
// every transaction would serialise the application's commits (a
// notifying commit holds a cluster-wide lock through its WAL flush).
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
	const rounds, together = 20, 3
	skipped := 0
	for range rounds {
		txs := make([]pgx.Tx, together)
		for i := range txs {
			if txs[i], err = pool.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			// The ones before hold their slots' locks until they commit;
			// this one must not wait.
			if _, err := txs[i].Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
				t.Fatal(err)
			}
			if _, err := txs[i].Exec(ctx, insert); err != nil {
				t.Fatalf("inserting transaction %d waited on the ones before it: %v", i+1, err)
			}
		}
		for _, tx := range txs {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
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
		switch {
		case n == 0:
			t.Fatal("three committed inserts, no wake-up")
		case n < together:
			skipped++
		}
	}
	if skipped == 0 {
		t.Errorf("every one of %d groups of %d transactions notified once each: the wake-up is not rate-limited", rounds, together)
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
