package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/postbox/postbox/outbox"
)

func init() {
	registerGroup(group{
		Name:    "suppressions",
		Summary: "the email suppression list: list, add, remove, check",
		Help: "Manages email_suppressions, the addresses postbox does not mail. Hard bounces, spam complaints, " +
			"relay refusals naming the mailbox (5.1.1 and similar) and repeated soft bounces add addresses on " +
			"their own, with the reason and the row that caused them; an email to a suppressed address fails at " +
			"once with that reason. Every addition and removal is logged in email_suppression_log with who.",
	})
	register(command{
		Name:    "suppressions list",
		Args:    "[--source S] [--limit N] [--json]",
		Summary: "the suppressed addresses, newest first, with reason, source and row",
		Help: "Lists suppressed addresses, newest first: when, the address, the source (manual, hard_bounce, " +
			"complaint, smtp_reply, soft_bounces), the row whose send or event caused it, and the reason.",
		Flags: func(fs *flag.FlagSet) runFunc {
			source := fs.String("source", "", "only this source: manual, hard_bounce, complaint, smtp_reply or soft_bounces")
			limit := intAtLeast(fs, "limit", outbox.DefaultListLimit, 1, "at most `N` entries")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, _ []string) error {
				switch outbox.SuppressionSource(*source) {
				case "", outbox.SourceManual, outbox.SourceHardBounce, outbox.SourceComplaint, outbox.SourceSMTPReply, outbox.SourceSoftBounces:
				default:
					return usagef("--source %q: want manual, hard_bounce, complaint, smtp_reply or soft_bounces", *source)
				}
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				list, err := outbox.ListSuppressions(ctx, pool, outbox.SuppressionSource(*source), *limit)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(env.Stdout, suppressionsJSON(list))
				}
				printSuppressions(env.Stdout, list)
				return nil
			}
		},
	})
	register(command{
		Name:       "suppressions add",
		Args:       "<address> --reason TEXT [--by WHO]",
		Positional: []string{"address"},
		Required:   []string{"reason"},
		Summary:    "stop mailing an address",
		Help: "Adds <address> to the list by hand (source manual), or replaces the reason of its entry. " +
			"Pending emails to it fail when their turn comes, with the reason.",
		Flags: func(fs *flag.FlagSet) runFunc {
			reason := fs.String("reason", "", "required: why, shown with every email it stops")
			by := fs.String("by", "", "who adds it, for the log (default $USER)")
			return func(ctx context.Context, env *Env, args []string) error {
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				if _, err := outbox.AddSuppression(ctx, pool, outbox.Suppression{Email: args[0], Reason: *reason,
					Source: outbox.SourceManual, CreatedBy: actor(*by)}); err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "%s suppressed: emails to it fail with %q\n", strings.ToLower(args[0]), *reason)
				return nil
			}
		},
	})
	register(command{
		Name:       "suppressions remove",
		Args:       "<address> [--by WHO]",
		Positional: []string{"address"},
		Summary:    "lift a suppression, so the next email goes out",
		Help: "Removes <address> from the list, whatever put it there, and logs who lifted it. The next email " +
			"to it is sent; emails that already failed stay failed ('worker requeue email <id>' sends one again).",
		Flags: func(fs *flag.FlagSet) runFunc {
			by := fs.String("by", "", "who lifts it, for the log (default $USER)")
			return func(ctx context.Context, env *Env, args []string) error {
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				s, err := outbox.LiftSuppression(ctx, pool, args[0], actor(*by), env.Logger)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "%s lifted (was %s: %s); the next email to it is sent\n", s.Email, s.Source, s.Reason)
				return nil
			}
		},
	})
	register(command{
		Name:       "suppressions check",
		Args:       "<address> [--json]",
		Positional: []string{"address"},
		Summary:    "whether an address is suppressed, and why",
		Help: "Says whether <address> is on the list and, if so, since when, why, from which source and row. " +
			"It exits 0 either way; --json prints {\"suppressed\": false} or the entry.",
		Flags: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, args []string) error {
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				s, ok, err := outbox.CheckSuppression(ctx, pool, args[0])
				if err != nil {
					return err
				}
				if *asJSON {
					if !ok {
						return writeJSON(env.Stdout, map[string]bool{"suppressed": false})
					}
					return writeJSON(env.Stdout, suppressionsJSON([]outbox.Suppression{s})[0])
				}
				if !ok {
					fmt.Fprintf(env.Stdout, "%s is not suppressed\n", strings.ToLower(args[0]))
					return nil
				}
				printSuppressions(env.Stdout, []outbox.Suppression{s})
				return nil
			}
		},
	})
}

// actor is who the log names: --by, else $USER, else "cli".
func actor(by string) string {
	if by != "" {
		return by
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "cli"
}

type suppressionJSON struct {
	Suppressed bool      `json:"suppressed"`
	Email      string    `json:"email"`
	Reason     string    `json:"reason"`
	Source     string    `json:"source"`
	SourceRow  string    `json:"source_row,omitempty"`
	CreatedBy  string    `json:"created_by,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

func suppressionsJSON(list []outbox.Suppression) []suppressionJSON {
	out := make([]suppressionJSON, len(list))
	for i, s := range list {
		out[i] = suppressionJSON{Suppressed: true, Email: s.Email, Reason: s.Reason, Source: string(s.Source),
			SourceRow: s.SourceRow, CreatedBy: s.CreatedBy, CreatedAt: s.CreatedAt}
	}
	return out
}

func printSuppressions(w io.Writer, list []outbox.Suppression) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no suppressed addresses")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SINCE\tADDRESS\tSOURCE\tROW\tBY\tREASON")
	for _, s := range list {
		row, by := s.SourceRow, s.CreatedBy
		if row == "" {
			row = "-"
		}
		if by == "" {
			by = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.CreatedAt.UTC().Format(time.RFC3339), s.Email, s.Source, row, by, s.Reason)
	}
	_ = tw.Flush()
}
