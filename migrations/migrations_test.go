package migrations_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/migrations"
)

func newMigrator(t *testing.T, pool *pgxpool.Pool) *migrations.Migrator {
	t.Helper()
	m, err := migrations.New(pool, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// downBelow steps m down one migration at a time until postbox's schema is
// below version, and returns the first refusal.
func downBelow(ctx context.Context, m *migrations.Migrator, version int64) error {
	for {
		s, err := m.State(ctx)
		if err != nil {
			return err
		}
		if s.Postbox.Current < version {
			return nil
		}
		if err := m.Down(ctx, false); err != nil {
			return err
		}
	}
}

func TestUpIsIdempotentAndDownRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t) // already migrated up by the harness
	m := newMigrator(t, pool)

	if err := m.Up(ctx); err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if err := m.RequireCurrent(ctx); err != nil {
		t.Fatalf("RequireCurrent after Up: %v", err)
	}

	if err := m.Down(ctx, true); err != nil {
		t.Fatalf("Down(all): %v", err)
	}
	s, err := m.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Postbox.Current != 0 || s.River.Current != 0 {
		t.Fatalf("after Down(all) state = %+v, want both at 0", s)
	}
	if err := m.RequireCurrent(ctx); !errors.Is(err, migrations.ErrBehind) {
		t.Fatalf("RequireCurrent at 0 = %v, want ErrBehind", err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		AND tablename NOT IN ($1)`, migrations.VersionTable).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("%d tables left after Down(all)", tables)
	}

	if err := m.Up(ctx); err != nil {
		t.Fatalf("Up after Down(all): %v", err)
	}
	if err := m.RequireCurrent(ctx); err != nil {
		t.Fatalf("RequireCurrent after re-Up: %v", err)
	}
}

func TestDownOneStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newMigrator(t, pgtest.NewPool(t))
	before, err := m.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Down(ctx, false); err != nil {
		t.Fatal(err)
	}
	after, err := m.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Postbox.Current >= before.Postbox.Current || after.Postbox.Current == 0 || after.River != before.River {
		t.Fatalf("Down one step: %+v → %+v", before, after)
	}
	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := m.State(ctx); err != nil || again != before {
		t.Fatalf("Up after one step down: %+v, %v; want %+v", again, err, before)
	}
}

// TestStatusColumnsAreChecked locks the CHECK constraints: a typo'd status
// written by any enqueuer is refused by the database, not silently stranded.
func TestStatusColumnsAreChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	for _, tc := range []struct{ name, sql string }{
		{"email_outbox.status", `INSERT INTO email_outbox (payload, status) VALUES ('{}', 'sent')`},
		{"email_outbox.kind", `INSERT INTO email_outbox (kind, payload) VALUES ('News Letter', '{}')`},
		{"email_outbox.payload", `INSERT INTO email_outbox (payload) VALUES ('[]')`},
		{"webhook_outbox.status", `INSERT INTO webhook_outbox (event_type, payload, status) VALUES ('a', '{}', 'skipped')`},
		{"webhook_endpoints.secret", `INSERT INTO webhook_endpoints (url, secret) VALUES ('https://x', 'plain')`},
	} {
		_, err := pool.Exec(ctx, tc.sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("%s: insert = %v, want check_violation", tc.name, err)
		}
	}

	// The contract's plain INSERT is enough.
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
		VALUES ('raw', 'cus_1', '{"to":"a@example.com","subject":"s","text":"t"}')`); err != nil {
		t.Fatalf("contract INSERT into email_outbox: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{}')`); err != nil {
		t.Fatalf("contract INSERT into webhook_outbox: %v", err)
	}
}

// Payloads are stored with lz4 where the server has it: the claim
// decompresses every payload and the dispatched mark's scrub recompresses
// it, and pglz costs about twice the CPU for both.
func TestPayloadsUseLZ4WhereAvailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var lz4 bool
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int >= 140000 AND EXISTS (
		SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	if !lz4 {
		t.Skip("this server has no lz4: the migration leaves the default compression")
	}
	for _, table := range []string{"email_outbox", "webhook_outbox", "webhook_events"} {
		var method string
		if err := pool.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = 'payload'`, table).Scan(&method); err != nil {
			t.Fatal(err)
		}
		if method != "l" {
			t.Errorf("%s.payload compression %q, want lz4 (l)", table, method)
		}
	}
}
