package migrations_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/migrations"
)

// TestEachMigrationLoggedOnce: Up logs one INFO line per migration applied,
// postbox's and River's; rivermigrate's own line per migration is DEBUG.
func TestEachMigrationLoggedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var buf bytes.Buffer
	m, err := migrations.New(pool, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Down(ctx, true); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "schema=river"); n != migrations.RiverTarget() {
		t.Errorf("%d River migration lines at INFO, want %d (one per migration):\n%s", n, migrations.RiverTarget(), out)
	}
	if strings.Contains(out, "Applied migration") {
		t.Errorf("rivermigrate's own line is logged at INFO too:\n%s", out)
	}
}
