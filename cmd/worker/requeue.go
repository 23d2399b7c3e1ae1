package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/outbox"
)

func init() {
	register(command{
		Name:  "requeue",
		Usage: "email|webhook <id> — send a failed email or webhook outbox row again (failed → pending, attempts 0, due now)",
		Run:   runRequeue,
	})
}

// requeuer puts one failed row of an outbox back to pending and says, in
// one line, what it did. A refusal is an error whose message says why.
type requeuer func(ctx context.Context, pool *pgxpool.Pool, id string) (string, error)

// requeuers maps `worker requeue <outbox> <id>` to its outbox. Other
// outboxes add themselves from their own file's init, e.g.
// requeuers["webhook"] = requeueWebhook.
var requeuers = map[string]requeuer{
	"email": requeueEmail,
}

func runRequeue(ctx context.Context, env *Env, args []string) error {
	if len(args) != 2 {
		return errUsage
	}
	requeue, ok := requeuers[args[0]]
	if !ok {
		return errUsage
	}
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	done, err := requeue(ctx, pool, args[1])
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, done)
	return nil
}

// requeueEmail runs outbox.Requeue. Its refusals already say why: a sent
// or skipped row lost its links and PDF (send a new email instead); a
// pending row needs no requeue.
func requeueEmail(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
	if err := outbox.Requeue(ctx, pool, id); err != nil {
		return "", err
	}
	return fmt.Sprintf("email %s requeued: pending, attempts 0, due now; the next tick sends it", id), nil
}
