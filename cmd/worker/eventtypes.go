package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/postbox/postbox/webhook"
)

func init() {
	registerGroup(group{
		Name:    "event-types",
		Summary: "the webhook event-type catalog: sync a directory, check it, list it",
		Help: "Works on the event-type catalog (webhook_event_types): the types the application sends, each " +
			"from a file DIR/<type>.json holding a description and optionally a JSON Schema, an example payload " +
			"and \"deprecated\": true (docs/OPERATIONS.md, Event types). A payload that fails its type's schema " +
			"is refused by EnqueueEvent and marked failed by the fan-out; while the catalog holds any type, " +
			"endpoints subscribe only to catalog types.",
	})
	register(command{
		Name:       "event-types check",
		Args:       "<dir>",
		Positional: []string{"dir"},
		NoEnv:      true,
		Summary:    "check a catalog directory: every file parses, every schema compiles, every example matches",
		Help: "Reads <dir> as `event-types sync` would, without a database: exits 0 when every <type>.json is " +
			"well formed, its schema compiles and its example matches its schema; 2 naming the file and the " +
			"problem when one is not.",
		Run: func(_ context.Context, env *Env, args []string) error {
			types, err := webhook.LoadEventTypes(args[0])
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			fmt.Fprintf(env.Stdout, "%s: %d event types, %d with a schema; every example matches its schema\n",
				args[0], len(types), countSchemas(types))
			return nil
		},
	})
	register(command{
		Name:       "event-types sync",
		Args:       "<dir>",
		Positional: []string{"dir"},
		Summary:    "make the catalog hold exactly the directory's types (added, updated, removed)",
		Help: "Checks <dir> as `event-types check` does, then, in one transaction, adds its new types, updates " +
			"the changed ones and removes the types it no longer holds. Refused, changing nothing, when an " +
			"endpoint subscribes to a type the catalog would no longer hold: change its subscription first " +
			"(`worker endpoints update ID --event-types …`), or keep the type with \"deprecated\": true. " +
			"A changed schema applies to every event not yet fanned out.",
		Run: func(ctx context.Context, env *Env, args []string) error {
			types, err := webhook.LoadEventTypes(args[0])
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			pool, err := env.MigratedPool(ctx)
			if err != nil {
				return err
			}
			s, err := webhook.SyncEventTypes(ctx, pool, types)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "synced %d event types from %s: %s added, %s updated, %s removed\n", len(types), args[0],
				listed(s.Added), listed(s.Updated), listed(s.Removed))
			return nil
		},
	})
	register(command{
		Name:    "event-types list",
		Args:    "[--json]",
		Summary: "the catalog: each type, whether it has a schema and an example, deprecated, its description",
		Help: "Lists the catalog's types by name, whether each has a schema and an example, whether it is " +
			"deprecated, and its description; --json prints the entries whole, schemas and examples included.",
		Flags: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, _ []string) error {
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				types, err := webhook.ListEventTypes(ctx, pool)
				if err != nil {
					return err
				}
				if *asJSON {
					enc := json.NewEncoder(env.Stdout)
					enc.SetIndent("", "  ")
					if types == nil {
						types = []webhook.EventType{}
					}
					return enc.Encode(types)
				}
				if len(types) == 0 {
					fmt.Fprintln(env.Stdout, "the catalog is empty: any event type is accepted and subscribed to (worker event-types sync DIR)")
					return nil
				}
				w := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "TYPE\tSCHEMA\tEXAMPLE\tDEPRECATED\tDESCRIPTION")
				for _, t := range types {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.Name, yesNo(len(t.Schema) > 0), yesNo(len(t.Example) > 0),
						yesNo(t.Deprecated), firstLine(t.Description))
				}
				return w.Flush()
			}
		},
	})
}

func countSchemas(types []webhook.EventType) int {
	n := 0
	for _, t := range types {
		if len(t.Schema) > 0 {
			n++
		}
	}
	return n
}

// listed is names as "a, b", or "none".
func listed(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// firstLine is a description's first line, for a table.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
