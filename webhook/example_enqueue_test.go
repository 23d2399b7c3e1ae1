package webhook_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/webhook"
)

// Example_enqueue writes an event into the webhook outbox inside the
// application's own transaction: it is fanned out to every subscribed
// endpoint if and only if the transaction commits; the table's insert
// trigger wakes the workers when it does.
func Example_enqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit

	// ... the application's own writes, e.g. marking the invoice paid ...

	id, err := webhook.Enqueue(ctx, tx, "invoice.paid", []byte(`{"invoice_id":"in_1","amount":4200}`))
	if err != nil {
		log.Fatal(err) // invalid JSON and oversized payloads are refused here
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", id)
}

// Example_pipeline runs the webhook transport without River: create an
// endpoint, then drain the outbox and retry due deliveries, as the tick and
// retry jobs of package jobs do on a schedule.
func Example_pipeline() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	cfg, err := webhook.SettingsFromEnv(os.LookupEnv)
	if err != nil {
		log.Fatal(err) // names the variable that does not parse
	}
	ep, err := webhook.CreateEndpoint(ctx, pool, cfg, webhook.EndpointParams{
		URL:        "https://hooks.example.com/postbox",
		EventTypes: []string{"invoice.paid"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("give the receiver its secret:", ep.Secret)

	p, err := webhook.NewDispatcher(pool, webhook.Config{Settings: cfg})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	sum, err := p.Drain(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d events dispatched, %d delivered\n", sum.Events, sum.Sent)
	if _, err := p.Retry(ctx); err != nil {
		log.Fatal(err)
	}
}
