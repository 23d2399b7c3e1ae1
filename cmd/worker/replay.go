package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/webhook"
)

func init() {
	register(command{
		Name: "replay",
		Usage: "event <event-id> | endpoint <endpoint-id> --since <RFC3339|24h|7d> — " +
			"send webhooks again as new events; an interrupted replay is completed by running it again",
		Run: runReplay,
	})
	// `worker requeue webhook <outbox-id>`: a failed webhook_outbox row
	// (its fan-out kept failing) back to pending.
	requeuers["webhook"] = requeueWebhook
}

func runReplay(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	fs := flag.NewFlagSet("replay "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	since := fs.String("since", "", "RFC3339 time, or an age such as 24h or 7d")
	pos, err := parseFlagsAnywhere(fs, args[1:])
	if err != nil || len(pos) != 1 {
		return errUsage
	}
	var from time.Time
	switch args[0] {
	case "event":
		if *since != "" {
			return errUsage
		}
	case "endpoint":
		if from, err = parseSince(*since, time.Now()); err != nil {
			return err
		}
	default:
		return errUsage
	}

	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	// The replay makes the first attempts itself, like the worker would,
	// with the same SSRF allowlist and lease figures.
	p, err := webhook.New(pool, webhook.Options{Config: env.Config.Webhook, Leases: env.Config.Leases, Logger: env.Logger})
	if err != nil {
		return err
	}
	defer p.Close()

	if args[0] == "event" {
		rep, err := p.ReplayEvent(ctx, pos[0])
		if err != nil {
			return err
		}
		verb := "replayed"
		if rep.Resumed {
			verb = "completed the interrupted replay of"
		}
		fmt.Fprintf(env.Stdout, "%s event %s as %s: %d deliveries; %s\n",
			verb, rep.ReplayOf, rep.EventID, rep.Deliveries, attemptsText(rep.Attempts))
		return nil
	}
	rb, err := p.ReplayFailedSince(ctx, pos[0], from)
	if err != nil {
		return err
	}
	if rb.Events == 0 {
		fmt.Fprintf(env.Stdout, "endpoint %s: no failed delivery since %s left to replay\n", pos[0], from.UTC().Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(env.Stdout, "endpoint %s: replayed %d events failed since %s (%d completing an interrupted run): %d deliveries; %s\n",
		pos[0], rb.Events, from.UTC().Format(time.RFC3339), rb.Resumed, rb.Deliveries, attemptsText(rb.Attempts))
	return nil
}

func attemptsText(s webhook.Tally) string {
	text := fmt.Sprintf("%d succeeded, %d will retry, %d failed", s.Sent, s.Retried, s.Failed)
	if s.Released > 0 {
		text += fmt.Sprintf(", %d left to the retry worker", s.Released)
	}
	return text
}

// parseSince reads --since: an RFC3339 time, a Go duration (24h) or a
// number of days (7d), the last two counted back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("--since is required, e.g. --since 24h or --since 2026-09-01T00:00:00Z")
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC3339 time (2026-09-01T00:00:00Z) or an age (24h, 7d)", s)
}

// requeueWebhook runs webhook.RequeueOutbox; its refusals say why.
func requeueWebhook(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
	if err := webhook.RequeueOutbox(ctx, pool, id); err != nil {
		return "", err
	}
	return fmt.Sprintf("webhook outbox row %s requeued: pending, attempts 0, due now; the next tick fans it out", id), nil
}
