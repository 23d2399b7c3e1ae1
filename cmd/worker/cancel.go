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
		Name:    "cancel",
		Summary: "withdraw a pending outbox row before it is sent",
		Help: "Withdraws one pending row — an email or a webhook_outbox event, typically one scheduled for " +
			"later — so the workers never send it. A row being sent right now, or one already sent, " +
			"skipped, failed or cancelled, is refused with the reason.",
	})
	register(command{
		Name:       "cancel email",
		Args:       "<id> [--by WHO]",
		Positional: []string{"id"},
		Summary:    "a pending email_outbox row to cancelled",
		Help: "Cancels the pending email_outbox row <id>: status cancelled, with when and who " +
			"(--by, default $USER); its secret links and PDF are removed as a skipped row's are, and it is " +
			"never sent. A row a worker is sending now (claimed, its lease running) is refused with the " +
			"lease's end: try again after it.",
		Flags: func(fs *flag.FlagSet) runFunc {
			by := fs.String("by", "", "who cancels it, for the record (default $USER)")
			return runRequeue(func(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
				if err := outbox.Cancel(ctx, pool, id, actor(*by)); err != nil {
					return "", err
				}
				return fmt.Sprintf("email %s cancelled: it will not be sent", id), nil
			})
		},
	})
	register(command{
		Name:       "cancel webhook",
		Args:       "<outbox-id> [--by WHO]",
		Positional: []string{"outbox-id"},
		Summary:    "a pending webhook_outbox row to cancelled, before its fan-out",
		Help: "Cancels the pending webhook_outbox row <outbox-id>: status cancelled, with when and who " +
			"(--by, default $USER); no event or delivery is ever made from it. An event already fanned " +
			"out (its row dispatched) is refused: its deliveries are not cancelled by this.",
		Flags: func(fs *flag.FlagSet) runFunc {
			by := fs.String("by", "", "who cancels it, for the record (default $USER)")
			return runRequeue(func(ctx context.Context, pool *pgxpool.Pool, id string) (string, error) {
				if err := webhook.Cancel(ctx, pool, id, actor(*by)); err != nil {
					return "", err
				}
				return fmt.Sprintf("webhook_outbox row %s cancelled: it will not be fanned out", id), nil
			})
		},
	})
}
