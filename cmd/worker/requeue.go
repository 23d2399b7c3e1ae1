package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

func init() {
	registerGroup(group{
		Name:    "requeue",
		Summary: "a failed outbox row back to pending",
		Help: "Puts one failed row back to pending — attempts 0, due now — so the workers send it " +
			"again: an email, a webhook_outbox row whose fan-out kept failing, or a " +
			"failed delivery (sent again to its own endpoint, under the same webhook-id). Other states are " +
			"refused with the reason.",
	})
	register(command{
		Name:       "requeue email",
		Args:       "<id> [--by WHO]",
		Positional: []string{"id"},
		Summary:    "a failed email_outbox row back to pending",
		Help: "Puts the failed email_outbox row <id> (from 'worker failed email') back to pending, attempts 0, " +
			"due now, and logs the requeue with who did it ('worker show' lists it among the row's attempts). " +
			"A sent or skipped row is refused: it lost its links and PDF when it was scrubbed, so send " +
			"a new email instead; a pending row needs no requeue.",
		Flags: func(fs *flag.FlagSet) runFunc {
			by := fs.String("by", "", "who requeues it, for the log (default $USER)")
			return runRequeue(func(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
				return requeueEmail(ctx, pool, id, actor(*by))
			})
		},
	})
	register(command{
		Name:       "requeue delivery",
		Args:       "<delivery-id> [--by WHO]",
		Positional: []string{"delivery-id"},
		Summary:    "a failed webhook delivery back to pending, for its own endpoint only",
		Help: "Puts the failed delivery <delivery-id> (from 'worker failed webhook') back to pending, attempts " +
			"0, due now: the retry lane sends it to its endpoint again under the same webhook-id, subject to the " +
			"endpoint's rate limit and breaker. Unlike 'worker replay event', no other endpoint receives anything. " +
			"A succeeded or pending delivery is refused.",
		Flags: func(fs *flag.FlagSet) runFunc {
			by := fs.String("by", "", "who requeues it (default $USER)")
			return runRequeue(func(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
				if err := webhook.RequeueDelivery(ctx, pool, id, actor(*by)); err != nil {
					return "", err
				}
				return fmt.Sprintf("delivery %s requeued: pending, attempts 0, due now; the retry lane sends it", id), nil
			})
		},
	})
	register(command{
		Name:       "requeue webhook",
		Args:       "<outbox-id>",
		Positional: []string{"outbox-id"},
		Summary:    "a failed webhook_outbox row (its fan-out kept failing) back to pending",
		Help: "Puts the failed webhook_outbox row <outbox-id> — an event whose fan-out kept failing, listed " +
			"under webhook_outbox by 'worker failed webhook' — back to pending, so the workers fan it out. " +
			"It takes an outbox row id, not a delivery id: a failed delivery is requeued with " +
			"'worker requeue delivery <delivery-id>'.",
		Run: runRequeue(requeueWebhook),
	})
}

// requeuer puts one failed row of an outbox back to pending and says, in
// one line, what it did. A refusal is an error whose message says why.
type requeuer func(ctx context.Context, pool *pgxpool.Pool, id string) (string, error)

func runRequeue(requeue requeuer) runFunc {
	return func(ctx context.Context, env *Env, args []string) error {
		pool, err := env.MigratedPool(ctx)
		if err != nil {
			return err
		}
		done, err := requeue(ctx, pool, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, done)
		return nil
	}
}

// requeueEmail runs outbox.Requeue. Its refusals already say why: a sent
// or skipped row lost its links and PDF (send a new email instead); a
// pending row needs no requeue.
func requeueEmail(ctx context.Context, pool *pgxpool.Pool, id, who string) (string, error) {
	if err := outbox.Requeue(ctx, pool, id, who); err != nil {
		return "", err
	}
	return fmt.Sprintf("email %s requeued: pending, attempts 0, due now; the workers send it within seconds", id), nil
}
