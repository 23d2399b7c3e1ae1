package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Migration 00018 on a database with history: up turns the three logs into
// tables partitioned by week without losing a row (the old rows become the
// legacy partition, in place), identities go on from where they were, and
// new rows land in the weeks; down makes them plain tables again, every
// row kept, with their old keys.
func TestHistoryPartitionsUpAndDownWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := newMigrator(t, pool)
	must := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	downTo := func(version int64) {
		t.Helper()
		if err := downBelow(ctx, m, version+1); err != nil {
			t.Fatalf("down to %d: %v", version, err)
		}
	}
	downTo(17)
	if kind := relkind(t, pool, "email_attempts"); kind != "r" {
		t.Fatalf("below 00018 email_attempts is relkind %q; want a plain table", kind)
	}
	// A hundred days of history: 300 attempts, 200 events and 200 webhook
	// attempts, the oldest 100 days old.
	must(`INSERT INTO email_outbox (kind, payload, created_at)
		SELECT 'raw', '{"to":"ada@example.com","subject":"s","text":"t"}', now() - i * interval '1 day'
		FROM generate_series(1, 100) i`)
	must(`INSERT INTO email_attempts (row_id, attempt, outcome, at)
		SELECT id, a, 'retry', created_at + a * interval '1 minute' FROM email_outbox, generate_series(1, 3) a`)
	must(`INSERT INTO email_events (row_id, type, provider, provider_event_id, received_at)
		SELECT id, 'deferred', 'generic', id::text || '-' || n, created_at FROM email_outbox, generate_series(1, 2) n`)
	must(`WITH ep AS (INSERT INTO webhook_endpoints (url, secret)
		VALUES ('https://example.com/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') RETURNING id),
	ev AS (INSERT INTO webhook_events (event_type, payload, created_at)
		SELECT 'invoice.paid', '{}', now() - i * interval '1 day' FROM generate_series(1, 100) i RETURNING id, created_at),
	d AS (INSERT INTO webhook_deliveries (event_id, endpoint_id, status, next_retry_at, created_at)
		SELECT ev.id, ep.id, 'succeeded', now(), ev.created_at FROM ev, ep RETURNING id, created_at)
	INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, created_at)
		SELECT id, a, 200, 5, created_at FROM d, generate_series(1, 2) a`)
	counts := func() [3]int {
		var c [3]int
		for i, table := range []string{"email_attempts", "email_events", "webhook_delivery_attempts"} {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&c[i]); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	before := counts()
	if before != [3]int{300, 200, 200} {
		t.Fatalf("seeded %v", before)
	}
	var maxEvent, maxAttempt int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT max(id) FROM email_events), (SELECT max(id) FROM webhook_delivery_attempts)`).Scan(&maxEvent, &maxAttempt); err != nil {
		t.Fatal(err)
	}

	if err := m.Up(ctx); err != nil {
		t.Fatalf("up to 00018 with a hundred days of history: %v", err)
	}
	if got := counts(); got != before {
		t.Fatalf("after 00018 the logs hold %v rows; want every one of %v", got, before)
	}
	for _, table := range []string{"email_attempts", "email_events", "webhook_delivery_attempts"} {
		if kind := relkind(t, pool, table); kind != "p" {
			t.Errorf("after 00018 %s is relkind %q; want partitioned (p)", table, kind)
		}
		if kind := relkind(t, pool, table+"_legacy"); kind != "r" {
			t.Errorf("after 00018 %s_legacy is relkind %q; want the old rows kept in place as a partition", table, kind)
		}
	}
	var newEvent, newAttempt int64
	if err := pool.QueryRow(ctx, `INSERT INTO email_events (type, provider, provider_event_id) VALUES ('deferred', 'generic', 'after-up') RETURNING id`).Scan(&newEvent); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_delivery_attempts (delivery_id, attempt, duration_ms)
		SELECT id, 3, 1 FROM webhook_deliveries LIMIT 1 RETURNING id`).Scan(&newAttempt); err != nil {
		t.Fatal(err)
	}
	if newEvent <= maxEvent || newAttempt <= maxAttempt {
		t.Errorf("ids after 00018: event %d (max before %d), attempt %d (max before %d); want them to go on", newEvent, maxEvent, newAttempt, maxAttempt)
	}
	// Next week's row has a week of its own.
	must(`INSERT INTO email_attempts (row_id, attempt, outcome, at) SELECT id, 9, 'sent', now() + interval '8 days' FROM email_outbox LIMIT 1`)
	var part string
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM email_attempts WHERE attempt = 9`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if part == "email_attempts_legacy" {
		t.Errorf("a row of next week went to %s; want a week of its own", part)
	}
	// A stored duplicate of the legacy key is still refused there.
	if _, err := pool.Exec(ctx, `INSERT INTO email_events (type, provider, provider_event_id, received_at)
		SELECT type, provider, provider_event_id, received_at FROM email_events WHERE provider_event_id <> 'after-up' LIMIT 1`); err == nil {
		t.Error("a second record of a provider event of before the upgrade was accepted")
	}

	downTo(17)
	after := counts()
	want := [3]int{before[0] + 1, before[1] + 1, before[2] + 1}
	if after != want {
		t.Fatalf("back below 00018 the logs hold %v rows; want %v: every row kept", after, want)
	}
	if kind := relkind(t, pool, "email_attempts"); kind != "r" {
		t.Errorf("back below 00018 email_attempts is relkind %q; want a plain table", kind)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_attempts (row_id, attempt, outcome) SELECT row_id, attempt, 'sent' FROM email_attempts LIMIT 1`); err == nil {
		t.Error("back below 00018 a second log of an attempt was accepted; want the primary key back")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_attempts (row_id, attempt, outcome) VALUES (gen_random_uuid(), 1, 'sent')`); err == nil {
		t.Error("back below 00018 an attempt of no row was accepted; want the foreign key back")
	}
	if err := m.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := counts(); got != want {
		t.Fatalf("up again: %v rows; want %v", got, want)
	}
}

func relkind(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var kind *string
	if err := pool.QueryRow(context.Background(), `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, table).Scan(&kind); err != nil {
		if err.Error() == "no rows in result set" {
			return ""
		}
		t.Fatal(err)
	}
	if kind == nil {
		return ""
	}
	return *kind
}
