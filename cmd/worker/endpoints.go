package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/webhook"
)

func init() {
	registerGroup(group{
		Name:    "endpoints",
		Summary: "webhook endpoints: create, list, update, disable, enable, delete, limit, traceparent, rotate-secret",
		Help: "Manages the webhook endpoints events fan out to. An endpoint receives the event types it " +
			"subscribes to (all, when it names none), signed with its own whsec_ secret (Standard Webhooks).",
	})
	register(command{
		Name:     "endpoints create",
		Args:     "--url URL [--tenant T] [--event-types a,b] [--secret whsec_…|-] [--traceparent] [--json]",
		Summary:  "add an endpoint; prints its secret once",
		Required: []string{"url"},
		Help: "Creates an endpoint for --url, subscribed to --event-types (every type when empty), and prints " +
			"its id and signing secret — shown once: give it to the receiver, which verifies webhook-signature " +
			"with it. With --tenant the endpoint is that tenant's and receives only its events (webhook_outbox.tenant_id, " +
			"webhook.Event.Tenant); without, only events of no tenant. The URL must pass the SSRF guard (WEBHOOK_ALLOWED_CIDRS) and, with APP_ENV=production, " +
			"be https. --traceparent makes each attempt carry its span's W3C traceparent header, so the " +
			"receiver's trace joins postbox's ('worker endpoints traceparent' changes it later).",
		Flags: func(fs *flag.FlagSet) runFunc {
			url := fs.String("url", "", "required: absolute http(s) URL (https only when APP_ENV=production)")
			tenant := fs.String("tenant", "", "whose the endpoint is: it receives only that tenant's events; empty: events of no tenant")
			types := fs.String("event-types", "", "comma-separated event types; empty: every type")
			secret := fs.String("secret", "", "whsec_ secret, or - to read it from stdin; empty: generate one")
			traceparent := fs.Bool("traceparent", false, "send each attempt's W3C traceparent header")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, _ []string) error {
				return endpointsCreate(ctx, env, webhook.EndpointParams{Tenant: *tenant, URL: *url, Secret: *secret, SendTraceparent: *traceparent}, *types, *asJSON)
			}
		},
	})
	register(command{
		Name:    "endpoints list",
		Summary: "every endpoint: id, tenant, state, breaker, limits, health, event types, URL",
		Help: "Lists every endpoint with its id, its tenant (- for none), whether it is enabled (and why not), its circuit breaker " +
			"(closed, recovering, open, probing, half-open; consecutive failures; paused until), its limits, its last hour's " +
			"success rate and p50/p99 attempt duration (--json: the last hour and day, the last error), whether " +
			"its attempts carry a traceparent header, event types and URL.",
		Args: "[--tenant T] [--json]",
		Flags: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print JSON")
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, _ []string) error {
				return endpointsList(ctx, env, *tenant, *asJSON)
			}
		},
	})
	register(command{
		Name:       "endpoints update",
		Args:       "<id> [--url URL] [--event-types a,b] [--tenant T] [--json]",
		Positional: []string{"id"},
		Summary:    "change an endpoint's URL or the event types it subscribes to",
		Help: "Changes endpoint <id>'s --url (held to the rules of create) or --event-types (comma-separated; " +
			"--event-types '' subscribes it to every type); what is not given stays. New subscriptions apply " +
			"from the next fan-out, a new URL from each delivery's next attempt. An endpoint's tenant never changes.",
		Flags: func(fs *flag.FlagSet) runFunc {
			var u webhook.EndpointUpdate
			fs.Func("url", "new absolute http(s) URL", func(v string) error { u.URL = &v; return nil })
			fs.Func("event-types", "new comma-separated event types; '' for every type", func(v string) error {
				types := splitEventTypes(v)
				u.EventTypes = &types
				return nil
			})
			tenant := tenantFlag(fs)
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *Env, args []string) error {
				if u.URL == nil && u.EventTypes == nil {
					return usagef("nothing to change: give --url or --event-types")
				}
				pool, calls, err := endpointsOf(ctx, env, *tenant)
				if err != nil {
					return err
				}
				ep, err := calls.UpdateEndpoint(ctx, pool, env.Config.Webhook, args[0], u)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(env.Stdout, ep)
				}
				fmt.Fprintf(env.Stdout, "endpoint %s updated\n  tenant       %s\n  url          %s\n  event types  %s\n",
					ep.ID, tenantText(ep.Tenant), webhook.RedactURL(ep.URL), eventTypesText(ep.EventTypes))
				return nil
			}
		},
	})
	register(command{
		Name:       "endpoints delete",
		Args:       "<id> --yes [--tenant T]",
		Positional: []string{"id"},
		Summary:    "remove an endpoint with its deliveries and their attempt logs",
		Help: "Deletes endpoint <id> together with its deliveries and their attempt logs: what it was sent is " +
			"forgotten, and a delivery in flight to it marks nothing. Without --yes it says how many deliveries " +
			"would go and deletes nothing. 'worker endpoints disable' stops sending and keeps the history.",
		Flags: func(fs *flag.FlagSet) runFunc {
			yes := fs.Bool("yes", false, "delete it")
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, args []string) error {
				pool, calls, err := endpointsOf(ctx, env, *tenant)
				if err != nil {
					return err
				}
				if !*yes {
					_, err = calls.GetEndpoint(ctx, pool, args[0])
					if err != nil {
						return err
					}
					n, err := webhook.CountEndpointDeliveries(ctx, pool, args[0])
					if err != nil {
						return err
					}
					return usagef("deleting endpoint %s removes it with its %d deliveries and their attempt logs; run again with --yes, or keep the history with: worker endpoints disable %s", args[0], n, args[0])
				}
				err = calls.DeleteEndpoint(ctx, pool, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "endpoint %s deleted, with its deliveries and their attempt logs\n", args[0])
				return nil
			}
		},
	})
	register(command{
		Name:       "endpoints disable",
		Args:       "<id> [--reason TEXT] [--tenant T]",
		Positional: []string{"id"},
		Summary:    "stop sending to an endpoint",
		Help: "Disables endpoint <id>: it receives no new events, and its pending deliveries are held " +
			"(pending, no attempt spent) until 'worker endpoints enable' sends them.",
		Flags: func(fs *flag.FlagSet) runFunc {
			reason := fs.String("reason", "", "why, shown by list")
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, args []string) error {
				pool, calls, err := endpointsOf(ctx, env, *tenant)
				if err != nil {
					return err
				}
				err = calls.DisableEndpoint(ctx, pool, args[0], *reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "endpoint %s disabled: it receives no new events; its pending deliveries are held until it is enabled\n", args[0])
				return nil
			}
		},
	})
	register(command{
		Name:       "endpoints enable",
		Args:       "<id> [--tenant T]",
		Positional: []string{"id"},
		Summary:    "send to a disabled endpoint again",
		Help: "Enables endpoint <id> again and closes its circuit breaker: new events reach it and the " +
			"deliveries held while it was disabled go out. Deliveries that had failed for good are not resent " +
			"by themselves: 'worker replay endpoint <id> --since …' does that.",
		Flags: func(fs *flag.FlagSet) runFunc {
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, args []string) error {
				pool, calls, err := endpointsOf(ctx, env, *tenant)
				if err != nil {
					return err
				}
				err = calls.EnableEndpoint(ctx, pool, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "endpoint %s enabled; held deliveries go out now. To resend what had failed for good: worker replay endpoint %s --since 24h\n", args[0], args[0])
				return nil
			}
		},
	})
	register(command{
		Name:       "endpoints limit",
		Args:       "<id> [--rate N] [--max-in-flight N]",
		Positional: []string{"id"},
		Summary:    "set an endpoint's pool-wide rate limit and in-flight cap",
		Help: "Sets endpoint <id>'s limits, enforced in the database across every replica: --rate requests " +
			"per second (0 removes the limit) and --max-in-flight attempts at once (0 removes it). A throttled " +
			"delivery waits without spending an attempt.",
		Flags: func(fs *flag.FlagSet) runFunc {
			var l webhook.Limits
			fs.Func("rate", "requests per second, up to 10000; 0 (the default): no limit", func(v string) error {
				r, err := strconv.ParseFloat(v, 64)
				if err != nil || r < 0 {
					return errors.New("must be 0 (none) or positive")
				}
				l.RateLimit = nil
				if r > 0 {
					l.RateLimit = &r
				}
				return (webhook.Limits{RateLimit: l.RateLimit}).Validate()
			})
			fs.Func("max-in-flight", "attempts in flight at once, up to 10000; 0 (the default): no cap", func(v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return errors.New("must be 0 (none) or positive")
				}
				l.MaxInFlight = nil
				if n > 0 {
					l.MaxInFlight = &n
				}
				return (webhook.Limits{MaxInFlight: l.MaxInFlight}).Validate()
			})
			return func(ctx context.Context, env *Env, args []string) error {
				pool, err := env.MigratedPool(ctx)
				if err != nil {
					return err
				}
				if err := webhook.SetLimits(ctx, pool, args[0], l); err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "endpoint %s limits: rate %s, in flight %s\n", args[0], limitText(l.RateLimit), limitText(l.MaxInFlight))
				return nil
			}
		},
	})
	register(command{
		Name:       "endpoints traceparent",
		Args:       "<id> on|off",
		Positional: []string{"id", "on|off"},
		Summary:    "send an endpoint each attempt's traceparent header, or stop",
		Help: "Turns endpoint <id>'s traceparent header on or off from its next attempt on. On, each attempt " +
			"carries the W3C traceparent of its span (postbox.webhook.attempt), so a receiver that traces joins " +
			"the trace the event was enqueued in. The header names a trace, no secret; off (the default) it " +
			"is not sent.",
		Run: func(ctx context.Context, env *Env, args []string) error {
			var on bool
			switch args[1] {
			case "on":
				on = true
			case "off":
			default:
				return usagef("<on|off> %q: want on or off", args[1])
			}
			pool, err := env.MigratedPool(ctx)
			if err != nil {
				return err
			}
			if err := webhook.SetSendTraceparent(ctx, pool, args[0], on); err != nil {
				return err
			}
			if on {
				fmt.Fprintf(env.Stdout, "endpoint %s: each attempt carries a traceparent header from the next one on\n", args[0])
			} else {
				fmt.Fprintf(env.Stdout, "endpoint %s: attempts carry no traceparent header from the next one on\n", args[0])
			}
			return nil
		},
	})
	register(command{
		Name:       "endpoints order-on-failure",
		Args:       "<id> block|proceed",
		Positional: []string{"id", "block|proceed"},
		Summary:    "what an ordering key does once a delivery of it fails for good",
		Help: "Sets endpoint <id>'s order_on_failure. block (the default): the rest of the key waits until the " +
			"failed delivery is requeued and delivered, or skipped ('worker ordering blocked' lists such keys). " +
			"proceed: the rest of the key goes on without it. Unordered events are not affected.",
		Run: func(ctx context.Context, env *Env, args []string) error {
			pool, err := env.MigratedPool(ctx)
			if err != nil {
				return err
			}
			if args[1] != webhook.OrderBlock && args[1] != webhook.OrderProceed {
				return usagef("<block|proceed> %q: want block or proceed", args[1])
			}
			if err := webhook.SetOrderOnFailure(ctx, pool, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "endpoint %s: order on failure %s\n", args[0], args[1])
			return nil
		},
	})
	register(command{
		Name:       "endpoints rotate-secret",
		Args:       "<id> [--keep 24h] [--tenant T] [--json]",
		Positional: []string{"id"},
		Summary:    "give an endpoint a new secret; the old one signs too until --keep ends",
		Help: "Generates a new signing secret for endpoint <id> and prints it once (it is never logged). For " +
			"--keep the old secret still signs every request too (webhook-signature carries both, space-" +
			"separated), so the receiver can switch at its own pace; then it stops. --keep 0 stops it at once.",
		Flags: func(fs *flag.FlagSet) runFunc {
			keep := 24 * time.Hour
			fs.Func("keep", "how long the old secret keeps signing, 0 to 720h (default 24h)", func(v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 || d > webhook.MaxRotationKeep {
					return fmt.Errorf("want a duration from 0 to %s", webhook.MaxRotationKeep)
				}
				keep = d
				return nil
			})
			asJSON := fs.Bool("json", false, "print JSON: id, secret and old_secret_expires_at (absent when --keep 0)")
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, args []string) error {
				pool, calls, err := endpointsOf(ctx, env, *tenant)
				if err != nil {
					return err
				}
				r, err := calls.RotateSecret(ctx, pool, args[0], "", keep)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(env.Stdout, r)
				}
				old := "the old secret stopped signing now"
				if !r.OldExpiresAt.IsZero() {
					old = "the old secret signs too until " + r.OldExpiresAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(env.Stdout, "endpoint %s has a new secret; %s\n  secret  %s\n\n"+
					"The secret is shown once: give it to the receiver, which verifies webhook-signature with it.\n",
					r.EndpointID, old, r.Secret)
				return nil
			}
		},
	})
}

// tenantFlag is --tenant on a command that takes an endpoint's id: with
// it, the command reaches that tenant's endpoints only (webhook.TenantScope).
func tenantFlag(fs *flag.FlagSet) *string {
	return fs.String("tenant", "", "act as this tenant: only its endpoints are reached, another's id is not found")
}

// endpointCalls are the calls the endpoints commands make: on every
// endpoint (the operator's) or, with --tenant, on one tenant's
// (webhook.TenantScope, whose methods these are).
type endpointCalls interface {
	ListEndpoints(ctx context.Context, db webhook.DB) ([]webhook.Endpoint, error)
	GetEndpoint(ctx context.Context, db webhook.DB, id string) (webhook.Endpoint, error)
	UpdateEndpoint(ctx context.Context, db webhook.DB, cfg webhook.Settings, id string, u webhook.EndpointUpdate) (webhook.Endpoint, error)
	DisableEndpoint(ctx context.Context, db webhook.DB, id, reason string) error
	EnableEndpoint(ctx context.Context, db webhook.DB, id string) error
	DeleteEndpoint(ctx context.Context, db webhook.DB, id string) error
	RotateSecret(ctx context.Context, db webhook.DB, id, secret string, keep time.Duration) (webhook.Rotation, error)
}

// everyEndpoint is the operator's endpointCalls: the package's functions.
type everyEndpoint struct{}

func (everyEndpoint) ListEndpoints(ctx context.Context, db webhook.DB) ([]webhook.Endpoint, error) {
	return webhook.ListEndpoints(ctx, db)
}
func (everyEndpoint) GetEndpoint(ctx context.Context, db webhook.DB, id string) (webhook.Endpoint, error) {
	return webhook.GetEndpoint(ctx, db, id)
}
func (everyEndpoint) UpdateEndpoint(ctx context.Context, db webhook.DB, cfg webhook.Settings, id string, u webhook.EndpointUpdate) (webhook.Endpoint, error) {
	return webhook.UpdateEndpoint(ctx, db, cfg, id, u)
}
func (everyEndpoint) DisableEndpoint(ctx context.Context, db webhook.DB, id, reason string) error {
	return webhook.DisableEndpoint(ctx, db, id, reason)
}
func (everyEndpoint) EnableEndpoint(ctx context.Context, db webhook.DB, id string) error {
	return webhook.EnableEndpoint(ctx, db, id)
}
func (everyEndpoint) DeleteEndpoint(ctx context.Context, db webhook.DB, id string) error {
	return webhook.DeleteEndpoint(ctx, db, id)
}
func (everyEndpoint) RotateSecret(ctx context.Context, db webhook.DB, id, secret string, keep time.Duration) (webhook.Rotation, error) {
	return webhook.RotateSecret(ctx, db, id, secret, keep)
}

// scopedPool parses --tenant into its scope, nil for none (the
// operator's), and opens the migrated pool the scoped calls run on: the
// preamble of every command that takes --tenant, a bad tenant refused
// before any connection is made.
func scopedPool(ctx context.Context, env *Env, tenant string) (*pgxpool.Pool, *webhook.TenantScope, error) {
	var scope *webhook.TenantScope
	if tenant != "" {
		s, err := webhook.ForTenant(tenant)
		if err != nil {
			return nil, nil, usagef("tenant: %v", err)
		}
		scope = &s
	}
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return nil, nil, err
	}
	return pool, scope, nil
}

// endpointsOf is the pool and the calls --tenant allows: one tenant's
// endpoints, or every one without it.
func endpointsOf(ctx context.Context, env *Env, tenant string) (webhook.DB, endpointCalls, error) {
	pool, scope, err := scopedPool(ctx, env, tenant)
	if err != nil {
		return nil, nil, err
	}
	if scope != nil {
		return pool, *scope, nil
	}
	return pool, everyEndpoint{}, nil
}

func limitText[T int | float64](v *T) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

func endpointsCreate(ctx context.Context, env *Env, p webhook.EndpointParams, types string, asJSON bool) error {
	url, secret := p.URL, p.Secret
	if secret == "-" {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read secret from stdin: %w", err)
		}
		secret = strings.TrimSpace(line)
	}
	eventTypes := splitEventTypes(types)
	if err := webhook.ValidateURL(url, env.Config.Webhook.Production); err != nil {
		return usagef("%v", err)
	}
	// Resolved now, as every attempt will: a URL the SSRF guard refuses
	// would fail each delivery at once, so it is not created.
	var dnsErr *net.DNSError
	switch err := webhook.CheckAddress(ctx, env.Config.Webhook, url); {
	case errors.As(err, &dnsErr):
		fmt.Fprintf(env.Stderr, "warning: %s does not resolve now (%v); each attempt resolves it again\n", dnsErr.Name, dnsErr.Err)
	case err != nil:
		return fmt.Errorf("not created: every attempt would be refused: %w", err)
	}
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	eps, err := webhook.ListEndpoints(ctx, pool)
	if err != nil {
		return err
	}
	for _, other := range eps {
		if other.URL == url && other.Tenant == p.Tenant {
			fmt.Fprintf(env.Stderr, "warning: endpoint %s already has this URL; its receiver will get each event once per endpoint\n", other.ID)
		}
	}
	p.EventTypes, p.Secret = eventTypes, secret
	ep, err := webhook.CreateEndpoint(ctx, pool, env.Config.Webhook, p)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(env.Stdout, ep)
	}
	fmt.Fprintf(env.Stdout, "endpoint %s created\n  tenant       %s\n  url          %s\n  event types  %s\n  traceparent  %s\n  secret       %s\n\n"+
		"The secret is shown once: give it to the receiver, which verifies webhook-signature with it.\n",
		ep.ID, tenantText(ep.Tenant), ep.URL, eventTypesText(ep.EventTypes), onOff(ep.SendTraceparent), ep.Secret)
	return nil
}

func endpointsList(ctx context.Context, env *Env, tenant string, asJSON bool) error {
	pool, calls, err := endpointsOf(ctx, env, tenant)
	if err != nil {
		return err
	}
	eps, err := calls.ListEndpoints(ctx, pool)
	if err != nil {
		return err
	}
	health := make([]webhook.Health, 0, len(eps))
	for _, ep := range eps {
		h, err := webhook.EndpointHealth(ctx, pool, ep.ID)
		if err != nil {
			return err
		}
		health = append(health, h)
	}
	if asJSON {
		return writeJSON(env.Stdout, health)
	}
	if len(eps) == 0 {
		fmt.Fprintln(env.Stdout, "no endpoints; add one with: worker endpoints create --url https://…")
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tSTATE\tBREAKER\tFAILURES\tPAUSED UNTIL\tRATE\tIN FLIGHT\tOK 1H\tP50/P99 1H\tTRACEPARENT\tEVENT TYPES\tURL")
	for _, h := range health {
		ep := h.Endpoint
		state := "enabled"
		if !ep.Enabled {
			state = "disabled: " + ep.DisabledReason
		}
		paused := "-"
		if p := ep.Breaker.PausedUntil; p != nil && ep.Breaker.State != "closed" {
			paused = p.UTC().Format(time.RFC3339)
		}
		ok, lat := "-", "-"
		if w := h.Windows[0]; w.Attempts > 0 {
			ok = fmt.Sprintf("%.0f%% of %d", 100*w.SuccessRate(), w.Attempts)
			lat = w.P50.Round(time.Millisecond).String() + "/" + w.P99.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ep.ID, tenantText(ep.Tenant), state, ep.Breaker.State, ep.Breaker.ConsecutiveFailures,
			paused, limitText(ep.RateLimit), limitText(ep.MaxInFlight), ok, lat, onOff(ep.SendTraceparent),
			eventTypesText(ep.EventTypes), webhook.RedactURL(ep.URL))
	}
	return tw.Flush()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// tenantText shows an endpoint's tenant, "-" for none.
func tenantText(tenant string) string {
	if tenant == "" {
		return "-"
	}
	return tenant
}

// splitEventTypes reads a comma-separated --event-types; empty is every type.
func splitEventTypes(s string) []string {
	types := []string{}
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			types = append(types, t)
		}
	}
	return types
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
