package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/postbox/postbox/webhook"
)

func init() {
	registerGroup(group{
		Name:    "ordering",
		Summary: "ordered webhook keys: what holds them, and letting them go on",
		Help: "Events enqueued with an ordering key go to each endpoint in the order they were enqueued. " +
			"A delivery that failed for good holds the rest of its key back while its endpoint's order_on_failure " +
			"is block (the default; 'worker endpoints order-on-failure' sets it): requeue it " +
			"('worker requeue delivery <id>', sent again before the rest) or skip it.",
	})
	register(command{
		Name:    "ordering blocked",
		Summary: "keys held back by a failed delivery, with the delivery to requeue or skip",
		Help: "Lists every endpoint and ordering key whose earliest failed delivery holds pending ones back: " +
			"the endpoint, the key, that delivery, its last error and how many wait behind it.",
		Flags: func(fs *flag.FlagSet) runFunc {
			limit := intAtLeast(fs, "limit", 100, 1, "at most `N` keys")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, _ []string) error {
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				keys, err := webhook.BlockedKeys(ctx, pool, *limit)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(env.Stdout, keys)
				}
				if len(keys) == 0 {
					fmt.Fprintln(env.Stdout, "no ordering key is held back by a failed delivery")
					return nil
				}
				tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ENDPOINT\tKEY\tFAILED DELIVERY\tWAITING\tFAILED SINCE\tLAST ERROR")
				for _, k := range keys {
					fmt.Fprintf(tw, "%s %s\t%s\t%s\t%d\t%s\t%s\n", k.EndpointID, k.EndpointURL, k.OrderingKey, k.Head, k.Waiting,
						k.FailedSince.UTC().Format("2006-01-02 15:04:05Z"), truncate(k.LastError, 80))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout, "fix: worker requeue delivery <id> (sent again, before the rest of its key), or worker ordering skip <id>")
				return nil
			}
		},
	})
	register(command{
		Name:       "ordering skip",
		Args:       "<delivery-id>",
		Positional: []string{"delivery-id"},
		Summary:    "let a key go on past its failed delivery",
		Help: "Lets the rest of the ordering key of the failed delivery <delivery-id> go on without it: the next " +
			"pending delivery of the key to that endpoint goes out at once, the rest in order after it. The failed " +
			"delivery stays failed; 'worker requeue delivery' still sends it later (after what is pending by then " +
			"is not guaranteed: it takes its original place only among what is still pending).",
		Run: func(ctx context.Context, env *Env, args []string) error {
			pool, err := env.MigratedPool(ctx)
			if err != nil {
				return err
			}
			if err := webhook.SkipOrderedHead(ctx, pool, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "delivery %s skipped: the rest of its key goes on without it\n", args[0])
			return nil
		},
	})
}
