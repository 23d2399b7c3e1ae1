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
		Name: "soak",
		Usage: "[--emails N] [--events N] [--chaos 90s] [--kill-every 3s-6s] [--seed N] … — crash soak on a throwaway " +
			"cluster: kill -9 workers, restart Postgres, faulty SMTP and receivers; prints the tally (docs/SOAK.md)",
		Run: runSoak,
	})
}

func runSoak(ctx context.Context, env *Env, args []string) error {
	opts := soak.Defaults()
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
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
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return errUsage
	}
	var err error
	if opts.KillEveryMin, opts.KillEveryMax, err = parseDurationRange(*killEvery); err != nil {
		return fmt.Errorf("--kill-every=%q: %w", *killEvery, err)
	}
	if opts.PGRestartAt, err = parseShare(*restartAt); err != nil {
		return fmt.Errorf("--pg-restart-at=%q: %w", *restartAt, err)
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
