package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/migrations"
)

// A Migrator applies postbox's schema and River's to one database, as
// `worker migrate up` does; `worker run` refuses to start until
// RequireCurrent passes.
func ExampleMigrator_Up() {
	ctx := context.Background()
	// An empty database for the example; in real code
	// pgxpool.New(ctx, os.Getenv("DATABASE_URL")).
	pool, err := pgxpool.New(ctx, pgtest.ExampleEmptyURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)) // one line per migration applied
	m, err := migrations.New(pool, logger)
	if err != nil {
		panic(err)
	}
	defer m.Close()

	err = m.RequireCurrent(ctx)
	fmt.Println("before Up, behind:", errors.Is(err, migrations.ErrBehind))

	for range 2 { // the second Up applies nothing
		if err := m.Up(ctx); err != nil {
			panic(err)
		}
		s, err := m.State(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("after Up, current:", s.Current(), "postbox at target:", s.Postbox.Current == s.Postbox.Target,
			"River at target:", s.River.Current == s.River.Target)
	}
	fmt.Println("RequireCurrent:", m.RequireCurrent(ctx))
	// Output:
	// before Up, behind: true
	// after Up, current: true postbox at target: true River at target: true
	// after Up, current: true postbox at target: true River at target: true
	// RequireCurrent: <nil>
}
