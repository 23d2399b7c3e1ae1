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
	register(command{
		Name: "endpoints",
		Usage: "create --url URL [--event-types a,b] [--secret whsec_…|-] [--json] | list [--json] | " +
			"disable <id> [--reason TEXT] | enable <id> — manage webhook endpoints",
		Run: runEndpoints,
	})
}

func runEndpoints(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("endpoints "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errUsage prints the usage line
	switch sub {
	case "create":
		url := fs.String("url", "", "absolute http(s) URL (https only when APP_ENV=production)")
		types := fs.String("event-types", "", "comma-separated event types; empty: every type")
		secret := fs.String("secret", "", "whsec_ secret, or - to read it from stdin; empty: generate one")
		asJSON := fs.Bool("json", false, "print JSON")
		if pos, err := parseFlagsAnywhere(fs, rest); err != nil || len(pos) != 0 || *url == "" {
			return errUsage
		}
		return endpointsCreate(ctx, env, *url, *types, *secret, *asJSON)
	case "list":
		asJSON := fs.Bool("json", false, "print JSON")
		if pos, err := parseFlagsAnywhere(fs, rest); err != nil || len(pos) != 0 {
			return errUsage
		}
		return endpointsList(ctx, env, *asJSON)
	case "disable":
		reason := fs.String("reason", "", "why, shown by list")
		pos, err := parseFlagsAnywhere(fs, rest)
		if err != nil || len(pos) != 1 {
			return errUsage
		}
		pool, err := env.MigratedPool(ctx)
		if err != nil {
			return err
		}
		if err := webhook.DisableEndpoint(ctx, pool, pos[0], *reason); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "endpoint %s disabled: it receives no new events; its pending deliveries fail when retried\n", pos[0])
		return nil
	case "enable":
		pos, err := parseFlagsAnywhere(fs, rest)
		if err != nil || len(pos) != 1 {
			return errUsage
		}
		pool, err := env.MigratedPool(ctx)
		if err != nil {
			return err
		}
		if err := webhook.EnableEndpoint(ctx, pool, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "endpoint %s enabled; to resend what failed meanwhile: worker replay endpoint %s --since 24h\n", pos[0], pos[0])
		return nil
	default:
		return errUsage
	}
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

// parseFlagsAnywhere parses flags before, between and after positional
// arguments (the flag package stops at the first positional), so both
// `disable <id> --reason x` and `disable --reason x <id>` work.
func parseFlagsAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
