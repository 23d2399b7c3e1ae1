package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

func init() {
	register(command{
		Name:  "failed",
		Usage: "email | webhook [--limit N] [--json] — what failed for good, and why",
		Run:   runFailed,
	})
}

// FailedRow is one row that failed for good and waits for an operator.
type FailedRow struct {
	Table     string    `json:"table"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Attempts  int       `json:"attempts"`
	What      string    `json:"what"` // recipient, or event type → endpoint
	Error     string    `json:"error"`
}

// failedQueries read the newest failed rows of each outbox through the
// failed partial indexes; $1 is the limit.
var failedQueries = map[string][]string{
	"email": {`SELECT 'email_outbox', id::text, created_at, attempts,
		kind || ' to ' || COALESCE(payload->>'to', '?'), COALESCE(last_error, '')
		FROM email_outbox WHERE status = 'failed' ORDER BY created_at DESC LIMIT $1`},
	"webhook": {
		`SELECT 'webhook_deliveries', d.id::text, d.created_at, d.attempts,
			e.event_type || ' → ' || p.url, COALESCE(d.last_error, '')
			FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
			JOIN webhook_endpoints p ON p.id = d.endpoint_id
			WHERE d.status = 'failed' ORDER BY d.created_at DESC LIMIT $1`,
		`SELECT 'webhook_outbox', id::text, created_at, attempts, event_type, COALESCE(last_error, '')
			FROM webhook_outbox WHERE status = 'failed' ORDER BY created_at DESC LIMIT $1`,
	},
}

func runFailed(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	queries, ok := failedQueries[args[0]]
	if !ok {
		return errUsage
	}
	fs := flag.NewFlagSet("failed", flag.ContinueOnError)
	limit := fs.Int("limit", 50, "rows per table")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 || *limit < 1 {
		return errUsage
	}
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	out := []FailedRow{}
	for _, q := range queries {
		rows, err := pool.Query(ctx, q, *limit)
		if err != nil {
			return err
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailedRow, error) {
			var f FailedRow
			err := r.Scan(&f.Table, &f.ID, &f.CreatedAt, &f.Attempts, &f.What, &f.Error)
			return f, err
		})
		if err != nil {
			return err
		}
		out = append(out, got...)
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(out) == 0 {
		fmt.Fprintf(env.Stdout, "no failed %s rows\n", args[0])
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tID\tCREATED\tATTEMPTS\tWHAT\tERROR")
	for _, f := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", f.Table, f.ID, f.CreatedAt.UTC().Format(time.RFC3339),
			f.Attempts, truncate(f.What, 60), truncate(f.Error, 100))
	}
	tw.Flush()
	fmt.Fprintf(env.Stdout, "\nrequeue one with: worker requeue %s <id>\n", args[0])
	return nil
}
