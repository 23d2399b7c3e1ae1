package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/postbox/postbox/migrations"
)

func init() {
	registerGroup(group{
		Name:    "migrate",
		Summary: "postbox's tables (goose) and River's (rivermigrate)",
		Help: "Applies, rolls back or reports the two schemas a worker needs: postbox's outbox tables " +
			"(goose, version table postbox_schema_version) and River's (rivermigrate). 'worker run' and the " +
			"other commands refuse to work while either is behind. With DATABASE_DIRECT_URL set (behind a " +
			"transaction pooler) they run on it rather than through the pooler.",
	})
	register(command{
		Name:    "migrate up",
		Summary: "apply every pending migration, postbox's then River's; twice is a no-op",
		Help: "Applies every pending migration, postbox's then River's, logging one line per migration, " +
			"then prints both schemas' versions. Running it again is a no-op. Run it once per deploy, before " +
			"the new workers start.",
		Run: migrateRun(func(ctx context.Context, m *migrations.Migrator) error { return m.Up(ctx) }),
	})
	register(command{
		Name:    "migrate down",
		Summary: "roll postbox's schema back one version; --all removes every table",
		Help: "Rolls postbox's schema back one version, then prints both schemas' versions. With --all it " +
			"removes every postbox table and then River's: all outbox rows, events, deliveries and River jobs " +
			"are lost.",
		Flags: func(fs *flag.FlagSet) runFunc {
			all := fs.Bool("all", false, "remove every postbox and River table (the data goes with them)")
			return func(ctx context.Context, env *Env, args []string) error {
				return migrateRun(func(ctx context.Context, m *migrations.Migrator) error { return m.Down(ctx, *all) })(ctx, env, args)
			}
		},
	})
	register(command{
		Name:    "migrate status",
		Summary: "print both schemas' versions; exit 1 while migrations are behind",
		Help: "Prints postbox's and River's schema versions against the versions this binary wants, and exits " +
			"0 when both are current, 1 when migrations are behind (run 'worker migrate up') or the database " +
			"cannot be read. It writes nothing, so a deploy can gate on it.",
		Run: migrateRun(nil),
	})
}

// migrateRun runs change (nil: nothing), then prints the state; while
// migrations are behind it ends with exit code 1.
func migrateRun(change func(context.Context, *migrations.Migrator) error) runFunc {
	return func(ctx context.Context, env *Env, _ []string) error {
		pool, err := env.migrationPool(ctx)
		if err != nil {
			return err
		}
		m, err := migrations.New(pool, env.Logger)
		if err != nil {
			return err
		}
		defer m.Close()
		if change != nil {
			if err := change(ctx, m); err != nil {
				return err
			}
		}
		s, err := m.State(ctx)
		if err != nil {
			return err
		}
		state := "current"
		if !s.Current() {
			state = "behind: run `worker migrate up`"
		}
		fmt.Fprintf(env.Stdout, "postbox schema  %d of %d\nRiver schema    %d of %d\n%s\n",
			s.Postbox.Current, s.Postbox.Target, s.River.Current, s.River.Target, state)
		if change == nil && !s.Current() {
			return &exitError{code: 1, err: migrations.ErrBehind}
		}
		return nil
	}
}
