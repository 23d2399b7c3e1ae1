package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/postbox/postbox/migrations"
)

func init() {
	register(command{
		Name:  "migrate",
		Usage: "up | down [--all] | status — migrate postbox's and River's tables",
		Run:   runMigrate,
	})
}

func runMigrate(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	fs := flag.NewFlagSet("migrate "+args[0], flag.ContinueOnError)
	all := fs.Bool("all", false, "down: remove every postbox and River table")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	pool, err := env.Pool(ctx)
	if err != nil {
		return err
	}
	m, err := migrations.New(pool, env.Logger)
	if err != nil {
		return err
	}
	defer m.Close()

	switch args[0] {
	case "up":
		if err := m.Up(ctx); err != nil {
			return err
		}
	case "down":
		if err := m.Down(ctx, *all); err != nil {
			return err
		}
	case "status":
	default:
		return errUsage
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
	return nil
}
