package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/postbox/postbox/internal/operator/backlog"
)

func init() {
	register(command{
		Name:    "stats",
		Summary: "rows per status, due now, oldest due age, recent errors — per outbox",
		Help: "Prints, for email_outbox, webhook_outbox and webhook_deliveries: the rows in each status " +
			"(exact counts: a scan of each table, fine for a command, not for a scrape), how many are due now " +
			"and how long the oldest due row has waited, then each table's most recent errors. /metrics " +
			"exports the cheap part of this as gauges.",
		Flags: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print JSON")
			recent := intAtLeast(fs, "errors", 5, 0, "show the `N` most recent errors per outbox")
			return func(ctx context.Context, env *Env, _ []string) error {
				return runStats(ctx, env, *asJSON, *recent)
			}
		},
	})
}

func runStats(ctx context.Context, env *Env, asJSON bool, recent int) error {
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	stats, err := backlog.ReadStats(ctx, pool, recent)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(env.Stdout, stats)
	}
	printStats(env.Stdout, stats)
	return nil
}

func printStats(w io.Writer, stats []backlog.Stats) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTBOX\tSTATUS\tROWS\tDUE NOW\tOLDEST DUE")
	for _, s := range stats {
		for i, st := range backlog.StatusOrder[s.Outbox] {
			due, age := "", ""
			if i == 0 {
				due, age = fmt.Sprint(s.Due), "-"
				if s.Due > 0 {
					age = s.OldestDueAge.Round(time.Second).String()
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Outbox, st, s.ByStatus[st], due, age)
		}
	}
	tw.Flush()
	for _, s := range stats {
		if len(s.RecentErrors) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nrecent errors — %s:\n", s.Outbox)
		for _, e := range s.RecentErrors {
			fmt.Fprintf(w, "  %s  %-8s attempt %-2d %s\n", e.ID, e.Status, e.Attempts, truncate(e.Error, 120))
		}
	}
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
