package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// Example_enqueue writes an event into the webhook outbox inside the
// application's own transaction: it is fanned out to every subscribed
// endpoint if and only if the transaction commits; the table's insert
// trigger wakes the workers when it does.
func Example_enqueue() {
	ctx := context.Background()
	// In real code: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), on a
	// database migrated by `worker migrate up`.
	pool := pgtest.ExamplePool()
	defer pool.Close()

	markPaid := func(payload string, fail error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// ... the application's own writes, e.g. marking the invoice paid ...
			if _, err := webhook.Enqueue(ctx, tx, "invoice.paid", []byte(payload)); err != nil {
				return err // invalid JSON and oversized payloads are refused here
			}
			return fail
		})
	}
	fmt.Println(markPaid(`{"invoice_id":"in_1","amount":4200}`, nil))
	fmt.Println(markPaid(`{"invoice_id":"in_2","amount":990}`, errors.New("rolled back")))
	fmt.Println(markPaid(`{"invoice_id":`, nil))

	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox WHERE status = 'pending'`).Scan(&pending); err != nil {
		panic(err)
	}
	fmt.Println("events waiting to fan out:", pending)
	// Output:
	// <nil>
	// rolled back
	// webhook: payload is not valid JSON
	// events waiting to fan out: 1
}

// Example_pipeline runs the webhook transport without River: create an
// endpoint, drain the outbox (fan-out and first attempts), then retry due
// deliveries, as the shifts and the retry pass of package jobs do on a
// schedule. The receiver here fails its first request.
func Example_pipeline() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in real code: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer pool.Close()

	var requests atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	// In production: webhook.SettingsFromEnv(os.LookupEnv). The receiver
	// listens on loopback, which the SSRF guard refuses unless admitted.
	env := map[string]string{webhook.EnvAllowedCIDRs: "127.0.0.0/8"}
	cfg, err := webhook.SettingsFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		panic(err) // names the variable that does not parse
	}
	ep, err := webhook.CreateEndpoint(ctx, pool, cfg, webhook.EndpointParams{
		URL:        receiver.URL,
		EventTypes: []string{"invoice.paid"},
	})
	if err != nil {
		panic(err)
	}
	_ = ep.Secret // give the receiver its secret (see Example_verify); only CreateEndpoint returns it

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := webhook.Enqueue(ctx, tx, "invoice.paid", []byte(`{"invoice_id":"in_1"}`))
		return err
	})
	if err != nil {
		panic(err)
	}

	p, err := webhook.NewDispatcher(pool, webhook.Config{
		Settings: cfg,
		Backoff:  []time.Duration{0}, // one retry, due at once; nil means webhook.DefaultBackoff
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	status := func() (s string) {
		if err := pool.QueryRow(ctx, `SELECT status || ' after ' || attempts || ' attempt(s)' FROM webhook_deliveries
WHERE endpoint_id = $1`, ep.ID).Scan(&s); err != nil {
			panic(err)
		}
		return s
	}

	sum, err := p.Drain(ctx, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("drain: %d event(s), %d delivered, %d to retry; %s\n", sum.Events, sum.Sent, sum.Retried, status())
	sum, err = p.DrainRetries(ctx, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("retry: %d delivered; %s\n", sum.Sent, status())
	// Output:
	// drain: 1 event(s), 0 delivered, 1 to retry; pending after 1 attempt(s)
	// retry: 1 delivered; succeeded after 2 attempt(s)
}
