package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// worker replay event sends an event where it went: one addressed to
// endpoint A reaches A again, and B, subscribed to every type, receives
// nothing — real receivers, counted.
func TestReplayEvent_AddressedEventReachesItsEndpointOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.URL(t)
	pool := pgtest.Connect(t, db)
	receiver := func() (*httptest.Server, *atomic.Int32) {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			n.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		return srv, &n
	}
	srvA, gotA := receiver()
	srvB, gotB := receiver()
	var ids []string
	for _, u := range []string{srvA.URL, srvB.URL} {
		ep, err := webhook.CreateEndpoint(ctx, pool, webhook.Settings{}, webhook.EndpointParams{URL: u})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ep.ID)
	}
	var event string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_events (event_type, payload, endpoint_id)
		VALUES ('invoice.paid', '{"n": 1}', $1) RETURNING id`, ids[0]).Scan(&event); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{"DATABASE_URL": db, "LOG_LEVEL": "error", "WEBHOOK_ALLOWED_CIDRS": "127.0.0.0/8,::1/128"}
	var out, errOut bytes.Buffer
	if code := runMain([]string{"replay", "event", event}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &out, &errOut); code != 0 {
		t.Fatalf("worker replay event: exit %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), "1 deliveries; 1 succeeded") || gotA.Load() != 1 || gotB.Load() != 0 {
		t.Fatalf("worker replay event printed %q; A got %d requests, B %d; want 1 delivery, to A only", out.String(), gotA.Load(), gotB.Load())
	}
}
