package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/postbox/postbox/internal/operator/backlog"
	"github.com/postbox/postbox/outbox"
)

func init() {
	registerGroup(group{
		Name:    "failed",
		Summary: "what failed for good, and why",
		Help: "Lists the newest rows of an outbox that failed for good and wait for an operator, with their " +
			"attempts and last error, and names the command that sends each again.",
	})
	register(command{
		Name:    "failed email",
		Summary: "failed email_outbox rows; send one again with 'worker requeue email <id>'",
		Help: "Lists the newest failed email_outbox rows: id, kind and recipient, attempts and last error. " +
			"'worker requeue email <id>' puts one back to pending.",
		Flags: failedFlags("email"),
	})
	register(command{
		Name:    "failed webhook",
		Summary: "failed deliveries (with event and endpoint ids) and failed webhook_outbox rows",
		Help: "Lists the newest failed webhook deliveries — with the event id and endpoint id that " +
			"'worker replay endpoint <endpoint-id> --since …' takes; 'worker requeue delivery <id>' sends one again — and " +
			"the failed webhook_outbox rows (events whose fan-out kept failing), which " +
			"'worker requeue webhook <outbox-id>' puts back to pending.",
		Flags: failedFlags("webhook"),
	})
}

func failedFlags(outbox string) func(fs *flag.FlagSet) runFunc {
	return func(fs *flag.FlagSet) runFunc {
		limit := intAtLeast(fs, "limit", 50, 1, "at most `N` rows per table, newest first")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(ctx context.Context, env *Env, _ []string) error {
			return runFailed(ctx, env, outbox, *limit, *asJSON)
		}
	}
}

func runFailed(ctx context.Context, env *Env, outbox string, limit int, asJSON bool) error {
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	out, err := backlog.ListFailed(ctx, pool, outbox, limit)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(env.Stdout, out)
	}
	if len(out) == 0 {
		fmt.Fprintf(env.Stdout, "no failed %s rows\n", outbox)
		return nil
	}
	printFailed(env.Stdout, out)
	return nil
}

// printFailed is the table, then per kind of row the command that sends
// it again: requeue for outbox rows and for one delivery (to its own
// endpoint, same webhook-id); replay for every failure of an endpoint.
func printFailed(w io.Writer, out []backlog.Failed) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tID\tCREATED\tATTEMPTS\tEVENT\tENDPOINT\tWHAT\tERROR")
	tables := map[string]backlog.Failed{} // per table, its oldest row listed
	payloads := 0                         // emails failed for their payload, which no requeue sends
	for _, f := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", f.Table, f.ID, f.CreatedAt.UTC().Format(time.RFC3339),
			f.Attempts, dash(f.EventID), dash(f.EndpointID), truncate(f.What, 60), truncate(f.Error, 100))
		if f.Table == "email_outbox" && outbox.FailedForPayload(f.Error) {
			payloads++
			continue
		}
		tables[f.Table] = f
	}
	tw.Flush()
	fmt.Fprintln(w)
	if payloads > 0 {
		fmt.Fprintln(w, "a row whose error begins 'decode payload:': "+outbox.CorrectedRowFix)
	}
	if _, ok := tables["email_outbox"]; ok {
		fmt.Fprintln(w, "send one again with: worker requeue email <id>")
	}
	if f, ok := tables["webhook_deliveries"]; ok {
		fmt.Fprintln(w, "send one delivery again, to its endpoint only, with: worker requeue delivery <id>")
		fmt.Fprintf(w, "or every event that failed at one endpoint with:      worker replay endpoint <endpoint-id> --since %s\n",
			f.CreatedAt.UTC().Truncate(time.Minute).Format(time.RFC3339))
	}
	if _, ok := tables["webhook_outbox"]; ok {
		fmt.Fprintln(w, "fan out a failed webhook_outbox row again with: worker requeue webhook <id>")
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
