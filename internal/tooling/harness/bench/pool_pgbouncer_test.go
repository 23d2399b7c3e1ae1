package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgbouncertest"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestRunPool_PgBouncerTinyPreset runs the pool-pgbouncer section at a
// tiny size: every path drains its emails and deliveries with nothing lost
// or duplicated (the run fails otherwise), and the table has each path and
// ratio. No timing is asserted.
func TestRunPool_PgBouncerTinyPreset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs worker processes and PgBouncer")
	}
	pgbouncertest.Binary(t)
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := RunPoolURL(ctx, url, PoolOptions{
		Replicas:    []int{1},
		Concurrency: 4,
		RelayDelay:  time.Millisecond,
		N:           100,
		Sections:    []string{SectionPoolPgBouncer},
		Progress:    testWriter{t, time.Now()},
	})
	if err != nil {
		t.Fatalf("RunPoolURL: %v", err)
	}
	for _, want := range []struct{ path, notes string }{
		{"R=1 direct, session", "100 emails + 40 deliveries (20 events × 2 endpoints)"},
		{"R=1 PgBouncer transaction, LISTEN on DATABASE_DIRECT_URL", "0 lost, 0 duplicates"},
		{"R=1 PgBouncer transaction, polling", "0 lost, 0 duplicates"},
		{"R=1 ratio PgBouncer transaction, LISTEN on DATABASE_DIRECT_URL / direct", "machine CPU per message"},
		{"R=1 ratio PgBouncer transaction, polling / direct", "machine CPU per message"},
	} {
		row, ok := rep.Find(titlePoolPgBouncer, want.path)
		if !ok {
			t.Errorf("no row %q in the report", want.path)
			continue
		}
		if row.Figure == "" || !strings.Contains(row.Notes, want.notes) {
			t.Errorf("row %q: figure %q, notes %q; want a figure and %q", want.path, row.Figure, row.Notes, want.notes)
		}
	}
}
