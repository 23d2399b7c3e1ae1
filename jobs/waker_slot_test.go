package jobs

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The insert trigger (migration 00005, postbox_wake) lets at most one
// transaction per table and 10 ms slot notify: the first to take the
// slot's advisory lock, whose second key is the database clock in
// hundredths of a second. A slot of a second would hold back every other
// committer's wake-up for that second. The test reads the key of the lock
// an insert took and checks it lies between the clock read just before
// and just after the insert, in hundredths: nothing is timed.
func TestWake_InsertNotifiesOncePerTenMillisecondSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const slotNow = `SELECT floor(extract(epoch FROM clock_timestamp()) * 100)::bigint % 2147483647`
	for _, tc := range []struct{ table, insert string }{
		{"email_outbox", `INSERT INTO email_outbox (customer_id, payload) VALUES ('cus_1', '{"to":"ada@example.com","subject":"Hi","text":"x"}')`},
		{"webhook_outbox", `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{}')`},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var before, after, slot int64
		if err := tx.QueryRow(ctx, slotNow).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, tc.insert); err != nil {
			t.Fatalf("%s: %v", tc.table, err)
		}
		if err := tx.QueryRow(ctx, slotNow).Scan(&after); err != nil {
			t.Fatal(err)
		}
		err = tx.QueryRow(ctx, `SELECT objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 2
	AND classid = (hashtext('postbox_wake:' || $1::text)::bigint & 4294967295)::oid`, tc.table).Scan(&slot)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("%s: the insert's wake-up lock: %v", tc.table, err)
		}
		if slot < before || slot > after {
			t.Errorf("%s: the insert notified for slot %d, want one of the hundredths of a second %d..%d it ran in", tc.table, slot, before, after)
		}
	}
}

// A transaction that finds its slot's lock taken notifies for the next
// slot instead (migration 00032, postbox_wake_notify): a row committed
// just after the slot's notifier would otherwise go without a wake-up.
// Another session holds the lock of every even slot of the next minute;
// inserts follow until one has run inside an even slot from start to end.
// That one must hold the next, odd, slot's lock, the one an odd-slot
// insert takes being its own. Nothing is timed: each insert's slot is
// read from the clock before and after it, and one that straddles two
// slots proves nothing and is skipped.
func TestWake_ATakenSlotNotifiesForTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const slotNow = `SELECT floor(extract(epoch FROM clock_timestamp()) * 100)::bigint`
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	var first int64
	if err := holder.QueryRow(ctx, slotNow).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('postbox_wake:email_outbox'), (s % 2147483647)::int)
FROM generate_series($1::bigint, $1::bigint + 6000) AS s WHERE s % 2 = 0`, first); err != nil {
		t.Fatal(err)
	}
	var sawEven, sawOdd bool
	for i := 0; !(sawEven && sawOdd); i++ {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var before, after int64
		var held []int64
		err = tx.QueryRow(ctx, slotNow).Scan(&before)
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO email_outbox (customer_id, payload) VALUES ('cus_1', '{"to":"ada@example.com","subject":"Hi","text":"x"}')`)
		}
		if err == nil {
			err = tx.QueryRow(ctx, slotNow).Scan(&after)
		}
		if err == nil {
			err = tx.QueryRow(ctx, `SELECT coalesce(array_agg(objid::bigint), '{}') FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 2
	AND classid = (hashtext('postbox_wake:email_outbox')::bigint & 4294967295)::oid`).Scan(&held)
		}
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after >= first+6000 {
			t.Fatalf("after %d inserts no even and odd slot seen whole within the minute held", i)
		}
		if before != after {
			continue
		}
		want := before
		if before%2 == 0 {
			want, sawEven = before+1, true
		} else {
			sawOdd = true
		}
		if len(held) != 1 || held[0] != want%2147483647 {
			t.Fatalf("insert in slot %d (held by another: %t) took the wake-up locks %v, want slot %d's", before, before%2 == 0, held, want)
		}
	}
}
