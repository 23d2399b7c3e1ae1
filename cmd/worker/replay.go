package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/webhook"
)

func init() {
	registerGroup(group{
		Name:    "replay",
		Summary: "send webhooks again, as new events",
		Help: "Sends webhooks again as new events (a clone with a new id that receivers will not dedupe " +
			"away, pointing at the original through replay_of) and makes the first attempts before returning; " +
			"deliveries that fail again follow the retry schedule, scaled by RETRY_BACKOFF_SCALE like the " +
			"workers'. An interrupted replay is completed, not duplicated, by running it again. " +
			"'worker failed webhook' lists the event and endpoint ids.",
	})
	register(command{
		Name:       "replay event",
		Args:       "<event-id> [--tenant T]",
		Positional: []string{"event-id"},
		Summary:    "an event again, where it went: its one endpoint, or every one subscribed to its type",
		Help: "Replays event <event-id> (or, given a replay, its original) where the original went: to the " +
			"endpoint it was addressed to (webhook_outbox.endpoint_id), or else to every enabled endpoint now " +
			"subscribed to its type, and prints how the first attempts went. With --tenant, only that tenant's " +
			"events are found.",
		Flags: func(fs *flag.FlagSet) runFunc {
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, args []string) error {
				p, scope, err := replayPipeline(ctx, env, *tenant)
				if err != nil {
					return err
				}
				defer p.Close()
				var rep webhook.Replay
				if scope != nil {
					rep, err = scope.ReplayEvent(ctx, p, args[0])
				} else {
					rep, err = p.ReplayEvent(ctx, args[0])
				}
				if err != nil {
					return err
				}
				verb := "replayed"
				if rep.Resumed {
					verb = "completed the interrupted replay of"
				}
				fmt.Fprintf(env.Stdout, "%s event %s as %s: %d deliveries; %s\n",
					verb, rep.ReplayOf, rep.EventID, rep.Deliveries, attemptsText(rep.Attempts, rep.Deliveries, replayBackoff(env.Config)))
				return nil
			}
		},
	})
	register(command{
		Name:       "replay endpoint",
		Args:       "<endpoint-id> --since <RFC3339|24h|7d> [--tenant T]",
		Positional: []string{"endpoint-id"},
		Required:   []string{"since"},
		Summary:    "every event whose delivery to one endpoint failed since a time",
		Help: "Replays, to endpoint <endpoint-id> only, every event whose delivery to it failed since --since " +
			"and has not reached it since; each event once, however often it failed. The endpoint must be " +
			"enabled. Running it again after it completed sends nothing new.",
		Flags: func(fs *flag.FlagSet) runFunc {
			since := sinceFlag(fs, "since", "required: an RFC3339 `time` (2026-09-01T00:00:00Z) or an age counted back from now (24h, 7d)")
			tenant := tenantFlag(fs)
			return func(ctx context.Context, env *Env, args []string) error {
				from := *since
				p, scope, err := replayPipeline(ctx, env, *tenant)
				if err != nil {
					return err
				}
				defer p.Close()
				var rb webhook.ReplayBatch
				if scope != nil {
					rb, err = scope.ReplayFailedSince(ctx, p, args[0], from)
				} else {
					rb, err = p.ReplayFailedSince(ctx, args[0], from)
				}
				if err != nil {
					return err
				}
				if rb.Events == 0 {
					fmt.Fprintf(env.Stdout, "endpoint %s: no failed delivery since %s left to replay\n", args[0], from.UTC().Format(time.RFC3339))
					return nil
				}
				fmt.Fprintf(env.Stdout, "endpoint %s: replayed %d events failed since %s (%d completing an interrupted run): %d deliveries; %s\n",
					args[0], rb.Events, from.UTC().Format(time.RFC3339), rb.Resumed, rb.Deliveries, attemptsText(rb.Attempts, rb.Deliveries, replayBackoff(env.Config)))
				return nil
			}
		},
	})
	register(command{
		Name:       "replay tenant",
		Args:       "<tenant> --since <RFC3339|24h|7d>",
		Positional: []string{"tenant"},
		Required:   []string{"since"},
		Summary:    "every event of a tenant whose delivery to one of its endpoints failed since a time",
		Help: "Replays, to each enabled endpoint of <tenant>, every event whose delivery to it failed since " +
			"--since and has not reached it since, as 'worker replay endpoint' does for one endpoint; a disabled " +
			"endpoint is passed over. Only that tenant's endpoints and events are reached.",
		Flags: func(fs *flag.FlagSet) runFunc {
			since := sinceFlag(fs, "since", "required: an RFC3339 `time` (2026-09-01T00:00:00Z) or an age counted back from now (24h, 7d)")
			return func(ctx context.Context, env *Env, args []string) error {
				p, scope, err := replayPipeline(ctx, env, args[0])
				if err != nil {
					return err
				}
				defer p.Close()
				rb, err := scope.RecoverSince(ctx, p, *since)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "tenant %s: replayed %d events failed since %s (%d completing an interrupted run): %d deliveries; %s\n",
					args[0], rb.Events, since.UTC().Format(time.RFC3339), rb.Resumed, rb.Deliveries, attemptsText(rb.Attempts, rb.Deliveries, replayBackoff(env.Config)))
				return nil
			}
		},
	})
}

// replayBackoff is the delivery retry schedule the workers use: the
// default, scaled by RETRY_BACKOFF_SCALE.
func replayBackoff(cfg Config) leases.Backoff {
	return webhook.DefaultBackoff.Scaled(cfg.RetryBackoffScale)
}

// replayPipeline is a webhook pipeline like the worker's: the replay makes
// the first attempts itself, with the same SSRF allowlist, lease figures
// and retry schedule. With a tenant, its scope too (nil without).
func replayPipeline(ctx context.Context, env *Env, tenant string) (*webhook.Dispatcher, *webhook.TenantScope, error) {
	pool, scope, err := scopedPool(ctx, env, tenant)
	if err != nil {
		return nil, nil, err
	}
	p, err := webhook.NewDispatcher(pool, webhook.Config{Settings: env.Config.Webhook, Leases: env.Config.Leases,
		Backoff: replayBackoff(env.Config), Logger: env.Logger})
	return p, scope, err
}

// attemptsText is how the first attempts of deliveries went; those that
// will retry do so after the schedule's first wait, and those that got no
// attempt wait for their endpoint's admission (a rate limit, an in-flight
// cap, an open breaker), which the retry worker sends when it admits them.
func attemptsText(s webhook.Tally, deliveries int, schedule leases.Backoff) string {
	text := fmt.Sprintf("%d succeeded, %d will retry, %d failed", s.Sent, s.Retried, s.Failed)
	if s.Retried > 0 && len(schedule) > 0 {
		text += fmt.Sprintf(" (first retry in about %s)", schedule[0].Round(time.Millisecond))
	}
	if s.Released > 0 {
		text += fmt.Sprintf(", %d left to the retry worker", s.Released)
	}
	if held := deliveries - s.Sent - s.Retried - s.Failed - s.Released; held > 0 {
		text += fmt.Sprintf(", %d queued behind the endpoint's limits (the retry worker sends them as it admits them)", held)
	}
	return text
}

// requeueWebhook runs webhook.RequeueOutbox; its refusals say why.
func requeueWebhook(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
	if err := webhook.RequeueOutbox(ctx, pool, id); err != nil {
		if errors.Is(err, webhook.ErrNotFound) {
			err = fmt.Errorf("%w; if %s is a delivery id, requeue it with: worker requeue delivery %s", err, id, id)
		}
		return "", err
	}
	return fmt.Sprintf("webhook outbox row %s requeued: pending, attempts 0, due now; the workers fan it out within seconds", id), nil
}
