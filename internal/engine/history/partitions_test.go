package history_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

const week = 7 * 24 * time.Hour

func exec(t *testing.T, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// A mark whose week does not exist fails, so every history table must
// reach WeeksAhead weeks past now; Ensure makes what is missing, once,
// even when every replica of a pool boots at the same moment.
func TestEnsure_MakesTheMissingWeeksAheadOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	if made, err := history.Ensure(ctx, db); err != nil || made != 0 {
		t.Fatalf("Ensure on a migrated database = %d, %v; want 0: the migration made the weeks ahead", made, err)
	}
	now := time.Now()
	for _, table := range history.Tables {
		weeks, err := history.Weeks(ctx, db, table)
		if err != nil {
			t.Fatal(err)
		}
		if ahead := history.AheadOf(weeks, now); ahead < history.WeeksAhead*week {
			t.Fatalf("%s reaches %s ahead; want at least %d weeks", table, ahead, history.WeeksAhead)
		}
	}
	dropNewestWeeks(t, db)

	var wg sync.WaitGroup
	made := make([]int, 4)
	errs := make([]error, 4)
	for i := range made {
		wg.Go(func() { made[i], errs[i] = history.Ensure(ctx, db) })
	}
	wg.Wait()
	total := 0
	for i := range made {
		if errs[i] != nil {
			t.Fatalf("replica %d's Ensure: %v", i, errs[i])
		}
		total += made[i]
	}
	if total != len(history.Tables) {
		t.Fatalf("four replicas booting together made %v weeks; want %d in all, one per table", made, len(history.Tables))
	}
}

// dropNewestWeeks takes each history table's newest week away, as if the
// passes had stopped a week ago.
func dropNewestWeeks(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	for _, table := range history.Tables {
		weeks, err := history.Weeks(context.Background(), db, table)
		if err != nil {
			t.Fatal(err)
		}
		newest := weeks[len(weeks)-1].Partition
		exec(t, db, `ALTER TABLE `+string(table)+` DETACH PARTITION `+newest)
		exec(t, db, `DROP TABLE `+newest)
	}
}

// openReader begins a transaction that has run sql, as a report that
// holds what it read until it ends; it is rolled back when t ends.
func openReader(t *testing.T, db *pgxpool.Pool, sql string) pgx.Tx {
	t.Helper()
	return pgtest.BeginWith(t, db, sql)
}

// history fixture: an email row with its attempts and events, and a
// webhook delivery with its attempts, one of each at each age.
func seedHistory(t *testing.T, db *pgxpool.Pool, ages ...time.Duration) {
	t.Helper()
	exec(t, db, `SELECT postbox_history_partitions(t, now() - interval '12 weeks', now())
		FROM unnest(ARRAY['email_attempts', 'email_events', 'webhook_delivery_attempts']::regclass[]) t`)
	var row, delivery string
	if err := db.QueryRow(context.Background(), `INSERT INTO email_outbox (kind, payload, created_at)
		VALUES ('raw', '{"to":"ada@example.com","subject":"s","text":"t"}', now() - interval '12 weeks') RETURNING id`).Scan(&row); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(context.Background(), `WITH ep AS (
		INSERT INTO webhook_endpoints (url, secret) VALUES ('https://example.com/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') RETURNING id
	), ev AS (
		INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id
	)
	INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at) SELECT ev.id, ep.id, now() FROM ev, ep RETURNING id`).Scan(&delivery); err != nil {
		t.Fatal(err)
	}
	for i, age := range ages {
		exec(t, db, `INSERT INTO email_attempts (row_id, attempt, outcome, at) VALUES ($1, $2, 'retry', now() - $3::interval)`, row, i+1, age)
		exec(t, db, `INSERT INTO email_events (row_id, type, provider, provider_event_id, received_at)
			VALUES ($1, 'deferred', 'generic', $2, now() - $3::interval)`, row, age.String(), age)
		exec(t, db, `INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, created_at)
			VALUES ($1, $2, 500, 1, now() - $3::interval)`, delivery, i+1, age)
	}
}

// Retention drops the weeks that end before now minus the retention, and
// only those: a row younger than its retention is never dropped, and a
// history kept for ever loses nothing. What was dropped is recorded.
func TestDrop_TakesOnlyTheWeeksWhollyPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	seedHistory(t, db, 9*week, 5*week, 3*week+3*24*time.Hour, 2*24*time.Hour)

	dropped, err := history.Drop(ctx, db, history.Retention{Email: 4 * week, Webhook: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"email_attempts", "email_events"} {
		ages := count(t, db, `SELECT count(*) FROM `+table)
		old := count(t, db, `SELECT count(*) FROM `+table+` WHERE coalesce(`+map[string]string{"email_attempts": "at", "email_events": "received_at"}[table]+`, now()) < now() - interval '4 weeks'`)
		if ages != 2 || old != 0 {
			t.Errorf("%s keeps %d rows (%d older than its retention); want the 2 younger than 4 weeks, and no older one", table, ages, old)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM webhook_delivery_attempts`); n != 4 {
		t.Errorf("webhook_delivery_attempts keeps %d rows; want all 4: its history is kept for ever here", n)
	}
	if len(dropped) == 0 {
		t.Fatal("Drop dropped nothing")
	}
	limit := time.Now().Add(-4 * week)
	for _, w := range dropped {
		if !w.End.Before(limit) || w.Table == history.WebhookDeliveryAttempts {
			t.Errorf("dropped %s of %s, which ends %s; want only weeks ending before %s", w.Partition, w.Table, w.End, limit)
		}
	}
	for _, table := range []history.Table{history.EmailAttempts, history.EmailEvents} {
		weeks, err := history.Weeks(ctx, db, table)
		if err != nil {
			t.Fatal(err)
		}
		if len(weeks) == 0 || weeks[0].End.Before(limit) {
			t.Errorf("%s's oldest week is %+v; want one ending after %s", table, weeks, limit)
		}
	}

	cutoffs, err := history.Dropped(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []history.Table{history.EmailAttempts, history.EmailEvents} {
		c, ok := cutoffs[table]
		if !ok || c.Retention != 4*week || c.Before.After(limit) || c.Before.Before(time.Now().Add(-9*week)) {
			t.Errorf("recorded cutoff of %s: %+v (%v); want retention 4 weeks and a cutoff between the dropped rows and %s", table, c, ok, limit)
		}
	}
	if _, ok := cutoffs[history.WebhookDeliveryAttempts]; ok {
		t.Error("a cutoff is recorded for webhook_delivery_attempts, which dropped nothing")
	}
}

// A week dropped while a reader lists the weeks — a /metrics scrape
// beside a history pass — is left out of the list, not a failure: the
// reader's snapshot still holds the week, but its table is gone. A
// repeatable-read transaction holds that snapshot for the test.
func TestWeeks_AWeekDroppedWhileListedIsLeftOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	exec(t, db, `SELECT postbox_history_partitions('email_events', now() - interval '3 weeks', now())`)
	before, err := history.Weeks(ctx, db, history.EmailEvents)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx) //nolint:errcheck // read only
	// Its snapshot, taken now.
	if _, err := reader.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	oldest := before[0].Partition
	exec(t, db, `ALTER TABLE email_events DETACH PARTITION `+pgx.Identifier{oldest}.Sanitize()+` CONCURRENTLY`)
	exec(t, db, `DROP TABLE `+pgx.Identifier{oldest}.Sanitize())

	weeks, err := history.Weeks(ctx, reader, history.EmailEvents)
	if err != nil {
		t.Fatalf("the weeks listed beside a drop: %v; want the weeks still there", err)
	}
	if len(weeks) != len(before)-1 || weeks[0].Partition == oldest {
		t.Fatalf("listed %d weeks beginning with %s; want the %d left, without the dropped %s", len(weeks), weeks[0].Partition, len(before)-1, oldest)
	}
}

// A detach cut short (its wait for a long reader timed out) leaves the
// week pending, attached to nothing new and never dropped: the next pass
// finishes it.
func TestDrop_FinishesADetachLeftPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	seedHistory(t, db, 9*week)
	weeks, err := history.Weeks(ctx, db, history.EmailAttempts)
	if err != nil {
		t.Fatal(err)
	}
	oldest := weeks[0].Partition

	// A reader holds the table; a detach waits for it, and is cut short.
	reader := openReader(t, db, `SELECT count(*) FROM email_attempts`)
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET statement_timeout = '300ms'`); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `ALTER TABLE email_attempts DETACH PARTITION `+pgx.Identifier{oldest}.Sanitize()+` CONCURRENTLY`)
	conn.Conn().Close(ctx) //nolint:errcheck // the connection's settings go with it
	conn.Release()
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "57014" {
		t.Fatalf("the detach behind a reader: %v; want it cut short (57014)", err)
	}
	if err := reader.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	weeks, err = history.Weeks(ctx, db, history.EmailAttempts)
	if err != nil {
		t.Fatal(err)
	}
	if !weeks[0].Pending {
		t.Fatalf("%s after the cut-short detach: %+v; want it pending", oldest, weeks[0])
	}

	if _, err := history.Drop(ctx, db, history.Retention{Email: 4 * week}); err != nil {
		t.Fatalf("Drop with a detach pending: %v", err)
	}
	var gone *string
	if err := db.QueryRow(ctx, `SELECT to_regclass($1)::text`, oldest).Scan(&gone); err != nil || gone != nil {
		t.Fatalf("%s after the next pass: %v (%v); want it dropped", oldest, gone, err)
	}
}

// While a drop waits for a long reader of the log (a report, pg_dump), the
// marks go on writing this week: DETACH ... CONCURRENTLY does not lock them
// out, as a plain DETACH would.
func TestDrop_MarksGoOnWhileADropWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	seedHistory(t, db, 9*week)
	var row string
	if err := db.QueryRow(ctx, `SELECT row_id FROM email_attempts LIMIT 1`).Scan(&row); err != nil {
		t.Fatal(err)
	}
	reader := openReader(t, db, `SELECT count(*) FROM email_attempts`)
	type result struct {
		dropped []history.Week
		err     error
	}
	done := make(chan result, 1)
	go func() {
		dropped, err := history.Drop(ctx, db, history.Retention{Email: 4 * week})
		done <- result{dropped, err}
	}()
	for count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE "email_attempts" DETACH%' AND wait_event_type = 'Lock'`) == 0 {
		select {
		case r := <-done:
			t.Fatalf("Drop ended (%v, %v) while a reader held the table; want it waiting", r.dropped, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// A mark, while the drop waits: it must not queue behind it.
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO email_attempts (row_id, attempt, outcome) VALUES ($1, 99, 'sent')`, row)
		return err
	})
	if err != nil {
		t.Fatalf("a mark while a drop waits for a reader: %v; want it written at once", err)
	}
	if err := reader.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.dropped) == 0 {
		t.Fatalf("Drop once the reader ended: %v, %v; want the old weeks dropped", r.dropped, r.err)
	}
}

// Making and dropping weeks touches the logs alone: a long transaction on
// the rows they log (a report over email_outbox and webhook_deliveries)
// holds neither up. A foreign key from the logs would make both lock the
// rows' tables, and give up after lockTimeout.
func TestEnsureAndDrop_DoNotLockTheRowsTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	seedHistory(t, db, 9*week)
	dropNewestWeeks(t, db)
	openReader(t, db, `SELECT count(*) FROM email_outbox, webhook_deliveries`)
	if made, err := history.Ensure(ctx, db); err != nil || made != len(history.Tables) {
		t.Fatalf("Ensure beside a report on the rows: %d, %v; want %d weeks made", made, err, len(history.Tables))
	}
	if dropped, err := history.Drop(ctx, db, history.Retention{Email: 4 * week, Webhook: 4 * week}); err != nil || len(dropped) == 0 {
		t.Fatalf("Drop beside a report on the rows: %v, %v; want the old weeks dropped", dropped, err)
	}
}
