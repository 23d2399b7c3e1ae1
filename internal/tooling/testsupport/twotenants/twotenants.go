// Package twotenants seeds a test database with two tenants, acme and
// globex, each with an endpoint on a loopback receiver and an event
// delivered to it: what the tests of the tenant portal and the HTTP API
// try one tenant's ids on the other with.
package twotenants

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// World is the seeded database.
type World struct {
	Pool *pgxpool.Pool
	// Receiver is both endpoints' server: a path starting /globex answers
	// 500, one holding "xss" answers markup, any other 200 "ok from
	// acme-receiver".
	Receiver   *httptest.Server
	Dispatcher *webhook.Dispatcher // loopback allowed

	Acme, Globex                 webhook.Endpoint // each with its secret
	AcmeEvent, GlobexEvent       string
	AcmeDelivery, GlobexDelivery string
}

// New seeds a fresh database.
func New(t *testing.T) *World {
	t.Helper()
	w := &World{Pool: pgtest.NewPool(t)}
	ctx := context.Background()
	w.Receiver = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/globex") {
			http.Error(rw, "globex receiver says no", http.StatusInternalServerError)
			return
		}
		if strings.Contains(r.URL.Path, "xss") {
			_, _ = rw.Write([]byte(`<script>window.__xss="excerpt"</script><img src=x onerror="window.__xss='excerpt-img'">`))
			return
		}
		_, _ = rw.Write([]byte("ok from acme-receiver"))
	}))
	t.Cleanup(w.Receiver.Close)
	var err error
	w.Acme, err = webhook.CreateEndpoint(ctx, w.Pool, webhook.Settings{}, webhook.EndpointParams{
		Tenant: "acme", URL: w.Receiver.URL + "/acme-in", Description: "acme billing"})
	if err != nil {
		t.Fatal(err)
	}
	w.Globex, err = webhook.CreateEndpoint(ctx, w.Pool, webhook.Settings{}, webhook.EndpointParams{
		Tenant: "globex", URL: w.Receiver.URL + "/globex-secret-path", Description: "globex private description"})
	if err != nil {
		t.Fatal(err)
	}
	w.Dispatcher, err = webhook.NewDispatcher(w.Pool, webhook.Config{Settings: webhook.Settings{
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Dispatcher.Close)
	for _, tenant := range []string{"acme", "globex"} {
		if err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
			_, err := webhook.Enqueuer{}.EnqueueEvent(ctx, tx, webhook.Event{Tenant: tenant, Type: "invoice.paid", Payload: []byte(`{"tenant":"` + tenant + `"}`)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	w.Drain(t)
	for _, ep := range []*webhook.Endpoint{&w.Acme, &w.Globex} {
		var delivery, event string
		if err := w.Pool.QueryRow(ctx, `SELECT id::text, event_id::text FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&delivery, &event); err != nil {
			t.Fatal(err)
		}
		if ep == &w.Acme {
			w.AcmeDelivery, w.AcmeEvent = delivery, event
		} else {
			w.GlobexDelivery, w.GlobexEvent = delivery, event
		}
	}
	return w
}

// Drain fans out and delivers what is pending.
func (w *World) Drain(t *testing.T) {
	t.Helper()
	if _, err := w.Dispatcher.Drain(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Snapshot is everything of globex's, read again after each call that
// must not change it.
func (w *World) Snapshot(t *testing.T) string {
	t.Helper()
	var s string
	if err := w.Pool.QueryRow(context.Background(), `SELECT string_agg(concat_ws('|', id, url, secret, description, event_types, enabled, disabled_reason, updated_at), ';')
		|| (SELECT count(*) FROM webhook_endpoint_secrets)::text || (SELECT count(*) FROM webhook_events)::text
		|| (SELECT count(*) FROM webhook_deliveries)::text || (SELECT count(*) FROM webhook_outbox)::text
		FROM webhook_endpoints WHERE tenant_id = 'globex'`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Leaks are the strings of globex's that no answer to acme may hold.
func (w *World) Leaks(t *testing.T) []string {
	t.Helper()
	secret, err := webhook.EndpointSecret(context.Background(), w.Pool, w.Globex.ID)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"globex-secret-path", "globex private", secret, "globex"}
}
