package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/postbox/postbox/internal/operator/story"
)

func init() {
	register(command{
		Name:       "show",
		Args:       "<anything> [--kind K] [--tenant T] [--json]",
		Positional: []string{"anything"},
		Summary:    "the whole story of an email, invoice, customer, address, event, delivery or endpoint",
		Help: "Prints everything known about <anything>: an email row id, an invoice id, a customer id (last 30 " +
			"days), a recipient address (last 30 days), a webhook event, delivery, endpoint or webhook_outbox " +
			"row id. It detects which (a UUID is looked up as each id kind in turn; an address as a recipient; " +
			"anything else as an invoice, then a customer); --kind forces one. For an email: every row with its " +
			"status, attempts, last error, suppression, dispatched_at, which secret keys are sealed, present " +
			"or scrubbed (never their values) and the command that would fix it. For an event: its deliveries " +
			"per endpoint with each attempt's status code, duration and response excerpt, and its replays. " +
			"With --tenant, only that tenant's webhook rows are found. " +
			"Exits 1 when nothing matches, naming what was searched; 2 for malformed input.",
		Flags: func(fs *flag.FlagSet) runFunc {
			var kind kindValue
			fs.Var(&kind, "kind", "force what <anything> is: `K` is email, invoice, customer, recipient, event, delivery, endpoint or webhook_outbox")
			asJSON := fs.Bool("json", false, "print JSON")
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, args []string) error {
				pool, scope, err := scopedPool(ctx, env, *tenant)
				if err != nil {
					return err
				}
				s, err := story.Find(ctx, pool, args[0], story.Kind(kind))
				switch {
				case errors.Is(err, story.ErrMalformed):
					return usagef("%v", err)
				case err != nil:
					return err
				}
				if scope != nil {
					owner, isHook := s.Tenant()
					if !isHook {
						return usagef("--tenant finds webhook events, deliveries, endpoints and webhook_outbox rows; %q is %s", args[0], s.Kind)
					}
					if owner != scope.Tenant() {
						return fmt.Errorf("%w: %s %s of tenant %s", story.ErrNotFound, s.Kind, args[0], scope.Tenant())
					}
				}
				if *asJSON {
					return writeJSON(env.Stdout, s)
				}
				return story.WriteText(env.Stdout, s)
			}
		},
	})
}

// kindValue is --kind, checked while the arguments are parsed.
type kindValue story.Kind

func (v *kindValue) Set(s string) error {
	k, err := story.ParseKind(s)
	if err != nil {
		return err
	}
	*v = kindValue(k)
	return nil
}

func (v *kindValue) String() string {
	if v == nil {
		return ""
	}
	return string(*v)
}
