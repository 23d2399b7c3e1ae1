package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/postbox/postbox/webhook"
)

func init() {
	registerGroup(group{
		Name:    "deliveries",
		Summary: "a tenant's webhook deliveries",
		Help:    "Lists webhook deliveries, one tenant's at a time; 'worker show <delivery-id>' prints one with its attempt log.",
	})
	register(command{
		Name:     "deliveries list",
		Args:     "--tenant T [--endpoint ID] [--status pending|succeeded|failed] [--limit N] [--json]",
		Required: []string{"tenant"},
		Summary:  "a tenant's deliveries, newest first",
		Help: "Lists the deliveries of <tenant>'s endpoints, newest first: id, status, attempts, event type, " +
			"endpoint, when made and the last error. --endpoint keeps one of its endpoints (another tenant's is " +
			"not found), --status one status, --limit at most that many (default 100, at most 1000). Each " +
			"delivery's attempt log: worker show <delivery-id> --tenant T.",
		Flags: func(fs *flag.FlagSet) runFunc {
			tenant := tenantFlag(fs)
			var q webhook.DeliveryQuery
			fs.StringVar(&q.EndpointID, "endpoint", "", "one of the tenant's endpoints")
			fs.Func("status", "pending, succeeded or failed", func(v string) error { q.Status = webhook.DeliveryStatus(v); return nil })
			fs.IntVar(&q.Limit, "limit", 100, "at most this many, up to 1000")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, _ []string) error {
				pool, scope, err := scopedPool(ctx, env, *tenant)
				if err != nil {
					return err
				}
				ds, err := scope.ListDeliveries(ctx, pool, q)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(env.Stdout, ds)
				}
				if len(ds) == 0 {
					fmt.Fprintf(env.Stdout, "no deliveries of tenant %s match\n", scope.Tenant())
					return nil
				}
				tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tATTEMPTS\tEVENT TYPE\tENDPOINT\tCREATED\tLAST ERROR")
				for _, d := range ds {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", d.ID, d.Status, d.Attempts, d.EventType, d.EndpointID,
						d.CreatedAt.UTC().Format(time.RFC3339), truncate(d.LastError, 80))
				}
				return tw.Flush()
			}
		},
	})
}
