package outbox

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Twenty transactions enqueue the same key for one customer at once, each
// holding its transaction open a moment after the insert so the others
// meet it uncommitted. Exactly one row is written, every caller gets its
// id, and the same key for another customer is a different row.
func TestEnqueue_IdempotencyKeyConcurrent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := testCtx(t)
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
				defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
				email := validEmail()
				email.IdempotencyKey = "invoice-42-finalized"
				if ids[i], err = Enqueue(ctx, tx, email); err != nil {
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
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox WHERE idempotency_key = 'invoice-42-finalized'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("rows with the key = %d, want 1", rows)
	}

	// The key is scoped per customer; no key means no deduplication.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // test cleanup
	other := validEmail()
	other.CustomerID, other.IdempotencyKey = "cus_2", "invoice-42-finalized"
	otherID, err := Enqueue(ctx, tx, other)
	if err != nil || otherID == ids[0] {
		t.Fatalf("same key, other customer: id %s, err %v; want a new row", otherID, err)
	}
	// Its repeat returns its own row, not the first customer's.
	if again, err := Enqueue(ctx, tx, other); err != nil || again != otherID {
		t.Fatalf("other customer's repeat: id %s, err %v; want its own row %s (the first customer's is %s)", again, err, otherID, ids[0])
	}
	a, errA := Enqueue(ctx, tx, validEmail())
	b, errB := Enqueue(ctx, tx, validEmail())
	if errA != nil || errB != nil || a == b {
		t.Fatalf("no key twice: ids %s, %s (errors %v, %v); want two rows", a, b, errA, errB)
	}
}

// Plain SQL gets the same through ON CONFLICT DO NOTHING, as the README
// shows it; the constraint refuses an empty key.
func TestEnqueue_IdempotencyKeyPlainSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := testCtx(t)
	const insert = `INSERT INTO email_outbox (customer_id, payload, idempotency_key)
VALUES ('cus_1', '{"to":"ada@example.com","subject":"Hi","text":"t"}', $1)
ON CONFLICT (customer_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`
	for i := range 2 {
		tag, err := pool.Exec(ctx, insert, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(1 - i); tag.RowsAffected() != want {
			t.Fatalf("insert %d wrote %d rows, want %d", i+1, tag.RowsAffected(), want)
		}
	}
	if _, err := pool.Exec(ctx, insert, ""); err == nil || !strings.Contains(err.Error(), "email_outbox_idempotency_key_format") {
		t.Fatalf("empty key: err %v, want the format constraint", err)
	}
}
