package webhook

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Twenty transactions enqueue one key at once, each holding its
// transaction open a moment after the insert so the others meet it
// uncommitted: one row is written and every caller gets its id.
func TestEnqueue_IdempotencyKeyConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const callers = 20
	ids := make([]string, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			errs[i] = func() error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
				ids[i], err = Enqueuer{}.EnqueueEvent(ctx, tx, Event{
					Type: "invoice.paid", Payload: []byte(`{"invoice":"in_1"}`), IdempotencyKey: "in_1.paid",
				})
				if err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond) // simulates: a caller's transaction open a while, so the others race it
				return tx.Commit(ctx)
			}()
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
		if ids[i] != ids[0] {
			t.Fatalf("caller %d got id %s, caller 0 got %s: want one id for one key", i, ids[i], ids[0])
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE idempotency_key = 'in_1.paid'`); n != 1 {
		t.Fatalf("rows with the key = %d, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox`); n != 1 {
		t.Fatalf("rows = %d, want 1: a duplicate writes nothing", n)
	}
}

func TestEnqueue_IdempotencyKeyRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = Enqueuer{}.EnqueueEvent(ctx, tx, Event{Type: "a.b", Payload: []byte(`{}`), IdempotencyKey: strings.Repeat("k", MaxIdempotencyKeyBytes+1)})
	if !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("long key: %v, want ErrInvalidEvent", err)
	}
	a, errA := Enqueuer{}.EnqueueEvent(ctx, tx, Event{Type: "a.b", Payload: []byte(`{}`)})
	b, errB := Enqueuer{}.EnqueueEvent(ctx, tx, Event{Type: "a.b", Payload: []byte(`{}`)})
	if errA != nil || errB != nil || a == b {
		t.Fatalf("no key twice: %s, %s (%v, %v); want two rows", a, b, errA, errB)
	}
	// Plain SQL: the README's ON CONFLICT DO NOTHING; an empty key is refused.
	const insert = `INSERT INTO webhook_outbox (event_type, payload, idempotency_key) VALUES ('a.b', '{}', $1)
ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`
	for i := range 2 {
		tag, err := tx.Exec(ctx, insert, "sql-key")
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(1 - i); tag.RowsAffected() != want {
			t.Fatalf("plain insert %d wrote %d rows, want %d", i+1, tag.RowsAffected(), want)
		}
	}
	if _, err := pool.Exec(ctx, insert, ""); err == nil || !strings.Contains(err.Error(), "webhook_outbox_idempotency_key_format") {
		t.Fatalf("empty key: %v, want the format constraint", err)
	}
}
