// Command soak is the crash soak of docs/SOAK.md: on a throwaway Postgres
// cluster it enqueues emails and webhook events, keeps several `worker run`
// processes (built from this module) running while it kill -9s one every
// few seconds, restarts Postgres once, and injects SMTP and receiver
// faults; then it waits for every row to reach a final state and prints
// the tally — lost, duplicated, stuck.
//
//	go run ./internal/tooling/cmd/soak --seed 20261201
//
// It is a program of its own so that the production binary does not link
// the harness. Exit codes: 0 every invariant held; 1 one broke or the run
// failed; 2 bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/postbox/postbox/internal/tooling/harness/gobuild"
	"github.com/postbox/postbox/internal/tooling/harness/program"
	"github.com/postbox/postbox/internal/tooling/harness/soak"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// runMain parses args and runs the soak; it returns the exit code.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return program.Main(ctx, "soak", args, stdout, stderr, soakFlags)
}

func soakFlags(fs *flag.FlagSet) program.Run {
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
	fs.StringVar(&opts.WorkerBinary, "worker", "", "the worker binary to run (default: build ./cmd/worker from this module)")
	fs.StringVar(&opts.LogDir, "logs", "", "keep worker logs in this directory (default: a temp dir, kept only on failure)")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		var err error
		if opts.KillEveryMin, opts.KillEveryMax, err = parseDurationRange(*killEvery); err != nil {
			return program.Usagef("--kill-every=%q: %v", *killEvery, err)
		}
		if opts.PGRestartAt, err = parseShare(*restartAt); err != nil {
			return program.Usagef("--pg-restart-at=%q: %v", *restartAt, err)
		}
		if opts.WorkerBinary == "" {
			dir, err := os.MkdirTemp("", "postbox-soak-bin-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if opts.WorkerBinary, err = gobuild.Worker(ctx, dir); err != nil {
				return err
			}
		}
		opts.Progress = stderr

		tally, err := soak.Run(ctx, opts)
		if err != nil {
			return err
		}
		tally.Print(stdout)
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
