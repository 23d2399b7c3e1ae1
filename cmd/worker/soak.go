package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/soak"
)

func init() {
	register(command{
		Name:    "soak",
		Summary: "kill -9s, a Postgres restart, SMTP and HTTP faults; prints the tally (docs/SOAK.md)",
		Help: "Crash soak on a throwaway Postgres cluster: enqueues --emails and --events, keeps --workers " +
			"'worker run' processes (this binary) running while it kill -9s one every --kill-every for --chaos, " +
			"restarts Postgres once, and injects SMTP and receiver faults; then waits for every row to reach a " +
			"final state and prints the tally — lost, duplicated, stuck — exiting 1 if any invariant broke. " +
			"--seed replays a run (docs/SOAK.md).",
		Flags: soakFlags,
	})
}

func soakFlags(fs *flag.FlagSet) runFunc {
	opts := soak.Defaults()
	fs.IntVar(&opts.Emails, "emails", opts.Emails, "email_outbox rows to enqueue")
	fs.IntVar(&opts.Events, "events", opts.Events, "webhook_outbox rows to enqueue")
	fs.IntVar(&opts.Endpoints, "endpoints", opts.Endpoints, "webhook endpoints, each with its own receiver")
	fs.IntVar(&opts.Workers, "workers", opts.Workers, "worker processes kept running")
	fs.DurationVar(&opts.Chaos, "chaos", opts.Chaos, "how long workers are killed")
	killEvery := fs.String("kill-every", "3s-6s", "random wait between two kill -9s: MIN-MAX or one duration")
	restartAt := fs.String("pg-restart-at", "40%", "when Postgres restarts, as a share of the chaos phase; \"never\" to skip")
	fs.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "bound on the whole run; rows not terminal by then count as lost")
	fs.Uint64Var(&opts.Seed, "seed", 0, "seed for kills and faults; 0 picks one (printed)")
	fs.StringVar(&opts.LogDir, "logs", "", "keep worker logs in this directory (default: a temp dir, kept only on failure)")
	return func(ctx context.Context, env *Env, _ []string) error {
		var err error
		if opts.KillEveryMin, opts.KillEveryMax, err = parseDurationRange(*killEvery); err != nil {
			return usagef("--kill-every=%q: %v", *killEvery, err)
		}
		if opts.PGRestartAt, err = parseShare(*restartAt); err != nil {
			return usagef("--pg-restart-at=%q: %v", *restartAt, err)
		}
		if opts.WorkerBinary, err = os.Executable(); err != nil {
			return fmt.Errorf("find the worker binary: %w", err)
		}
		opts.Progress = env.Stderr

		tally, err := soak.Run(ctx, opts)
		if err != nil {
			return err
		}
		tally.Print(env.Stdout)
		return tally.Err()
	}
}

// parseDurationRange reads "3s-6s" or "4s".
func parseDurationRange(s string) (lo, hi time.Duration, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	if lo, err = time.ParseDuration(strings.TrimSpace(a)); err != nil {
		return 0, 0, err
	}
	if hi, err = time.ParseDuration(strings.TrimSpace(b)); err != nil {
		return 0, 0, err
	}
	if lo <= 0 || hi < lo {
		return 0, 0, fmt.Errorf("want MIN-MAX with 0 < MIN ≤ MAX")
	}
	return lo, hi, nil
}

// parseShare reads "40%", "0.4" or "never" (→ -1).
func parseShare(s string) (float64, error) {
	if s == "never" || s == "none" {
		return -1, nil
	}
	pct := strings.HasSuffix(s, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, err
	}
	if pct {
		f /= 100
	}
	if f < 0 || f > 1 {
		return 0, fmt.Errorf("want a share between 0%% and 100%%")
	}
	return f, nil
}
