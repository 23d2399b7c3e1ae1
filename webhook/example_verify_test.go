package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// Example_verify is the receiver's side: every delivery is signed the
// Standard Webhooks way, so the receiver verifies it with webhook.Verify
// (or any conforming library) and the endpoint's secret, before trusting
// the raw body. The webhook-id header is the event id: the same on
// every attempt, for deduplicating at-least-once delivery.
func Example_verify() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in real code: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer pool.Close()

	var secret string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read failed", http.StatusBadRequest)
			return
		}
		if err := webhook.Verify(secret, r.Header, body); err != nil {
			fmt.Println("refused:", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var event struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &event); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		fmt.Println("verified", event.Type, string(event.Data))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	// The SSRF guard refuses loopback unless admitted; production admits
	// nothing (WEBHOOK_ALLOWED_CIDRS unset).
	cfg := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ep, err := webhook.CreateEndpoint(ctx, pool, cfg, webhook.EndpointParams{URL: receiver.URL})
	if err != nil {
		panic(err)
	}
	// The secret is shown once, here; the receiver keeps it.
	secret = ep.Secret

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := webhook.Enqueue(ctx, tx, "invoice.paid", []byte(`{"invoice_id":"in_1","amount":4200}`))
		return err
	})
	if err != nil {
		panic(err)
	}
	p, err := webhook.NewDispatcher(pool, webhook.Config{Settings: cfg})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	if _, err := p.Drain(ctx, 30*time.Second); err != nil {
		panic(err)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&status); err != nil {
		panic(err)
	}
	fmt.Println("delivery:", status)
	// Output:
	// verified invoice.paid {"amount":4200,"invoice_id":"in_1"}
	// delivery: succeeded
}
