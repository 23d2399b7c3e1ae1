package pgbouncertest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/pgbouncer"
)

// Binary finds PgBouncer, or skips the test (fails it under CI).
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := pgbouncer.Find()
	if err == nil {
		return bin
	}
	if os.Getenv("CI") != "" {
		t.Fatal(err)
	}
	t.Skip(err)
	return ""
}

// Options shape the pooler; the zero value is transaction mode with 8
// server connections per database and user.
type Options struct {
	DefaultPoolSize int
	MaxClientConn   int
	// PoolMode is PgBouncer's pool_mode; "" is transaction.
	PoolMode string
}

// Start runs PgBouncer (in transaction mode unless o says otherwise) in front of the server that
// databaseURL (a pgtest.URL) is on, until the test ends, and returns it
// and databaseURL through it.
func Start(t testing.TB, bin, databaseURL string, o Options) (*pgbouncer.Bouncer, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Bin: bin, Dir: t.TempDir(), Upstream: databaseURL,
		PoolMode: o.PoolMode, DefaultPoolSize: o.DefaultPoolSize, MaxClientConn: o.MaxClientConn})
	if err != nil {
		t.Fatalf("pgbouncertest: %v", err)
	}
	t.Cleanup(func() {
		b.Close()
		if t.Failed() {
			t.Logf("pgbouncer's log:\n%s", b.Output())
		}
	})
	pooled, err := b.URL(databaseURL)
	if err != nil {
		t.Fatalf("pgbouncertest: %v", err)
	}
	return b, pooled
}
