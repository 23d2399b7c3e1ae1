package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// opsEmail is the email OPS_EMAIL gets when the dispatcher disables an
// endpoint: failing for too long, or a 410 Gone. The customer id scopes
// its idempotency key, the endpoint and the disable's time: a retried
// disable writes one email.
func opsEmail(to string, d webhook.EndpointDisabled) outbox.Email {
	endpoint := d.EndpointID + " (" + d.URL + ")"
	if d.Tenant != "" {
		endpoint += " of tenant " + strconv.Quote(d.Tenant)
	}
	var run string
	if !d.FailingSince.IsZero() {
		run = fmt.Sprintf("It had failed %d times in a row since %s. ", d.ConsecutiveFailures, d.FailingSince.UTC().Format(time.RFC3339))
	}
	return outbox.Email{
		Kind:       outbox.KindRaw,
		CustomerID: "postbox-ops",
		Payload: outbox.Payload{
			To:      to,
			Subject: "postbox: webhook endpoint " + d.EndpointID + " disabled",
			Text: fmt.Sprintf("Webhook endpoint %s was disabled at %s: %s.\n\n"+
				"%sIts pending deliveries are held, not lost: "+
				"once the receiver is fixed, run\n\n    worker endpoints enable %s\n",
				endpoint, d.DisabledAt.UTC().Format(time.RFC3339), d.Reason, run, d.EndpointID),
			Trigger: webhook.EventEndpointDisabled,
		},
		IdempotencyKey: webhook.EventEndpointDisabled + ":" + d.EndpointID + ":" + d.DisabledAt.UTC().Format(time.RFC3339Nano),
	}
}

// opsEmailNotice is webhook.Config.OnDisable for OPS_EMAIL: the email is
// enqueued through the email outbox in the disabling transaction. Nil when
// OPS_EMAIL is unset.
func opsEmailNotice(to string, keys *outbox.KeyRing) func(context.Context, pgx.Tx, webhook.EndpointDisabled) error {
	if to == "" {
		return nil
	}
	e := &outbox.Enqueuer{Keys: keys}
	return func(ctx context.Context, tx pgx.Tx, d webhook.EndpointDisabled) error {
		_, err := e.Enqueue(ctx, tx, opsEmail(to, d))
		return err
	}
}
