package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/migrations"
)

var (
	setupOnce sync.Once
	server    *pgserver.Server
	template  string
	setupErr  error

	// exampleDBs are the databases ExampleURL and ExampleEmptyURL made,
	// dropped by Main once the examples have run.
	exampleMu  sync.Mutex
	exampleDBs []string
)

// Main runs the package's tests and examples, drops the databases examples
// asked for, and stops a throwaway cluster afterwards.
// Use it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	dropExampleDatabases()
	if server != nil {
		if err := server.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop throwaway cluster:", err)
		}
	}
	return code
}

// URL returns the connection string of a new, migrated database that is
// dropped when t ends. Use it for subprocesses (worker binaries); in-process
// tests want NewPool.
func URL(t testing.TB) string {
	t.Helper()
	return testDatabase(t, true)
}

// EmptyURL is URL for an empty database, for a test that migrates it
// itself as a user would (`worker migrate up`).
func EmptyURL(t testing.TB) string {
	t.Helper()
	return testDatabase(t, false)
}

func testDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	setupOnce.Do(setup)
	if setupErr != nil {
		t.Fatalf("pgtest: %v", setupErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, tpl := "pbtest_"+randomHex(8), ""
	if migrated {
		tpl = template
	}
	url, err := pgserver.CreateDatabase(ctx, server.URL, name, tpl)
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgserver.DropDatabase(ctx, server.URL, name); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	return url
}

// ExampleURL returns the connection string of a new, migrated database for
// a testable example, which has no *testing.T to clean up after it: the
// database is dropped when Main's m.Run returns, so only packages whose
// TestMain calls Main may use it. It panics on error.
func ExampleURL() string { return exampleDatabase(true) }

// ExampleEmptyURL is ExampleURL for an empty database, for examples that
// migrate it themselves.
func ExampleEmptyURL() string { return exampleDatabase(false) }

// ExamplePool returns a pool on ExampleURL's database. The example closes
// it; Main drops the database. It panics on error.
func ExamplePool() *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), ExampleURL())
	if err != nil {
		panic(fmt.Sprintf("pgtest: example pool: %v", err))
	}
	return pool
}

func exampleDatabase(migrated bool) string {
	setupOnce.Do(setup)
	if setupErr != nil {
		panic(fmt.Sprintf("pgtest: %v", setupErr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, tpl := "pbtest_ex_"+randomHex(8), ""
	if migrated {
		tpl = template
	}
	url, err := pgserver.CreateDatabase(ctx, server.URL, name, tpl)
	if err != nil {
		panic(fmt.Sprintf("pgtest: example database: %v", err))
	}
	exampleMu.Lock()
	exampleDBs = append(exampleDBs, name)
	exampleMu.Unlock()
	return url
}

func dropExampleDatabases() {
	exampleMu.Lock()
	names := exampleDBs
	exampleDBs = nil
	exampleMu.Unlock()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := pgserver.DropDatabase(ctx, server.URL, name); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: drop %s: %v\n", name, err)
		}
		cancel()
	}
}

// ServerURL returns a URL to the harness's server with rights to create
// databases, for commands (like `worker demo`) that make their own.
func ServerURL(t testing.TB) string {
	t.Helper()
	setupOnce.Do(setup)
	if setupErr != nil {
		t.Fatalf("pgtest: %v", setupErr)
	}
	return server.URL
}

// NewPool returns a pool on a new, migrated database that is closed and
// dropped when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Connect(t, URL(t))
}

// Connect returns a pool on url (from URL), closed when t ends. Use it when
// a test shares its database with a subprocess.
func Connect(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close) // registered after the drop, so it runs first
	return pool
}

func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	server, setupErr = pgserver.Find(ctx, logger, "TEST_DATABASE_URL", "DATABASE_URL")
	if setupErr != nil {
		return
	}
	template, setupErr = ensureTemplate(ctx, logger)
}

// ensureTemplate returns the name of a template database migrated to this
// binary's schema, building it if no process has yet.
//
// The template is named after the week too: migrating makes the history
// tables' weeks from the current one ahead, so a template made in an
// earlier week lacks weeks a replica booting now would make, and in time
// the week its marks need.
func ensureTemplate(ctx context.Context, logger *slog.Logger) (string, error) {
	name := "pbtpl_" + schemaHash() + "_" + weekOf(time.Now())
	var exists bool
	if err := adminQueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", []any{name}, &exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_b" + randomHex(4)
	url, err := pgserver.CreateDatabase(ctx, server.URL, building, "")
	if err != nil {
		return "", err
	}
	err = migrate(ctx, url, logger)
	if err == nil {
		err = pastWeeks(ctx, url)
	}
	if err != nil {
		_ = pgserver.DropDatabase(ctx, server.URL, building)
		return "", err
	}
	err = adminExec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name))
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P04" {
		// Another process won the race; its template is as good as ours.
		err = pgserver.DropDatabase(ctx, server.URL, building)
	}
	return name, err
}

// pastWeeks makes the history tables' weeks of the last four weeks, which
// migrating (from the current week on) does not: tests date rows hours
// or days back — a bounce two hours ago, an attempt 48 h ago — and on a
// Monday morning those fall in the week before.
func pastWeeks(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT postbox_history_partitions(t, now() - interval '4 weeks', now())
FROM unnest(ARRAY['email_attempts', 'email_events', 'webhook_delivery_attempts']::regclass[]) t`)
	return err
}

func migrate(ctx context.Context, url string, logger *slog.Logger) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.New(pool, logger)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Up(ctx)
}

// weekOf is the Monday (UTC) that starts t's week, as Postgres's
// date_trunc('week', …) counts weeks, e.g. "20261207".
func weekOf(t time.Time) string {
	t = t.UTC()
	return t.AddDate(0, 0, -((int(t.Weekday()) + 6) % 7)).Format("20060102")
}

// schemaHash names the template after the embedded migrations, so a schema
// change builds a new template instead of reusing a stale one.
func schemaHash() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.SQL, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(migrations.SQL, path)
		h.Write([]byte(path))
		h.Write(data)
		return err
	})
	fmt.Fprint(h, migrations.RiverTarget())
	// What ensureTemplate does beyond migrating: a template made otherwise
	// is another template.
	fmt.Fprint(h, "pastWeeks 4")
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func adminExec(ctx context.Context, sql string) error {
	conn, err := pgserver.Connect(ctx, server.URL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func adminQueryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	conn, err := pgserver.Connect(ctx, server.URL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
