package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/postbox/postbox/webhook"
)

func init() {
	registerGroup(group{
		Name:    "endpoints",
		Summary: "webhook endpoints: create, list, disable, enable",
		Help: "Manages the webhook endpoints events fan out to. An endpoint receives the event types it " +
			"subscribes to (all, when it names none), signed with its own whsec_ secret (Standard Webhooks).",
	})
	register(command{
		Name:     "endpoints create",
		Args:     "--url URL [--event-types a,b] [--secret whsec_…|-] [--json]",
		Summary:  "add an endpoint; prints its secret once",
		Required: []string{"url"},
		Help: "Creates an endpoint for --url, subscribed to --event-types (every type when empty), and prints " +
			"its id and signing secret — shown once: give it to the receiver, which verifies webhook-signature " +
			"with it. The URL must pass the SSRF guard (WEBHOOK_ALLOWED_CIDRS) and, with APP_ENV=production, " +
			"be https.",
		Flags: func(fs *flag.FlagSet) runFunc {
			url := fs.String("url", "", "required: absolute http(s) URL (https only when APP_ENV=production)")
			types := fs.String("event-types", "", "comma-separated event types; empty: every type")
			secret := fs.String("secret", "", "whsec_ secret, or - to read it from stdin; empty: generate one")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, _ []string) error {
				return endpointsCreate(ctx, env, *url, *types, *secret, *asJSON)
			}
		},
	})
	register(command{
		Name:    "endpoints list",
		Summary: "every endpoint: id, state, event types, URL",
		Help:    "Lists every endpoint with its id, whether it is enabled (and why not), its event types and URL.",
		Flags: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, _ []string) error { return endpointsList(ctx, env, *asJSON) }
		},
	})
	register(command{
		Name:       "endpoints disable",
		Args:       "<id> [--reason TEXT]",
		Positional: []string{"id"},
		Summary:    "stop sending to an endpoint",
		Help: "Disables endpoint <id>: it receives no new events, and its pending deliveries fail when " +
			"retried. 'worker endpoints enable' undoes it.",
		Flags: func(fs *flag.FlagSet) runFunc {
			reason := fs.String("reason", "", "why, shown by list")
			return func(ctx context.Context, env *Env, args []string) error {
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				if err := webhook.DisableEndpoint(ctx, pool, args[0], *reason); err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "endpoint %s disabled: it receives no new events; its pending deliveries fail when retried\n", args[0])
				return nil
			}
		},
	})
	register(command{
		Name:       "endpoints enable",
		Args:       "<id>",
		Positional: []string{"id"},
		Summary:    "send to a disabled endpoint again",
		Help: "Enables endpoint <id> again: new events reach it. What failed while it was disabled is not " +
			"resent by itself: 'worker replay endpoint <id> --since …' does that.",
		Run: func(ctx context.Context, env *Env, args []string) error {
			pool, err := env.MigratedPool(ctx)
			if err != nil {
				return err
			}
			if err := webhook.EnableEndpoint(ctx, pool, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "endpoint %s enabled; to resend what failed meanwhile: worker replay endpoint %s --since 24h\n", args[0], args[0])
			return nil
		},
	})
}

func endpointsCreate(ctx context.Context, env *Env, url, types, secret string, asJSON bool) error {
	if secret == "-" {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read secret from stdin: %w", err)
		}
		secret = strings.TrimSpace(line)
	}
	var eventTypes []string
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			eventTypes = append(eventTypes, t)
		}
	}
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	ep, err := webhook.CreateEndpoint(ctx, pool, env.Config.Webhook, webhook.EndpointParams{URL: url, EventTypes: eventTypes, Secret: secret})
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(env.Stdout, ep)
	}
	fmt.Fprintf(env.Stdout, "endpoint %s created\n  url          %s\n  event types  %s\n  secret       %s\n\n"+
		"The secret is shown once: give it to the receiver, which verifies webhook-signature with it.\n",
		ep.ID, ep.URL, eventTypesText(ep.EventTypes), ep.Secret)
	return nil
}

func endpointsList(ctx context.Context, env *Env, asJSON bool) error {
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	eps, err := webhook.ListEndpoints(ctx, pool)
	if err != nil {
		return err
	}
	if asJSON {
		if eps == nil {
			eps = []webhook.Endpoint{}
		}
		return writeJSON(env.Stdout, eps)
	}
	if len(eps) == 0 {
		fmt.Fprintln(env.Stdout, "no endpoints; add one with: worker endpoints create --url https://…")
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tEVENT TYPES\tURL")
	for _, ep := range eps {
		state := "enabled"
		if !ep.Enabled {
			state = "disabled: " + ep.DisabledReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ep.ID, state, eventTypesText(ep.EventTypes), ep.URL)
	}
	return tw.Flush()
}

func eventTypesText(types []string) string {
	if len(types) == 0 {
		return "all"
	}
	return strings.Join(types, ",")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
