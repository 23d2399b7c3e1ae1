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
