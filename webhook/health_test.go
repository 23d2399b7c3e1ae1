package webhook

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// EndpointHealth reads the windows, the streak of failures back to the
// last success, and the last error from the attempt log.
func TestEndpointHealth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	ep := createEndpoint(t, pool, "https://hooks.example.com/a")
	other := createEndpoint(t, pool, "https://hooks.example.com/b")
	var ev string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_events (event_type, payload) VALUES ('t', '{}') RETURNING id`).Scan(&ev); err != nil {
		t.Fatal(err)
	}
	delivery := func(endpoint string) string {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id) VALUES ($1, $2) RETURNING id`, ev, endpoint).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	d, o := delivery(ep.ID), delivery(other.ID)
	// Oldest first: two days ago a success and a failure (outside both
	// windows), then in
	// the last day 4 successes of 100..400 ms, then in the last hour one
	// success and three failures.
	for _, a := range []struct {
		id   string
		ago  time.Duration
		code any
		ms   int
		err  any
	}{
		{d, 48 * time.Hour, 200, 5000, nil},
		{d, 30 * time.Hour, 500, 5000, "HTTP 500"}, // before the last success: not in the streak
		{d, 20 * time.Hour, 200, 100, nil},
		{d, 19 * time.Hour, 204, 200, nil},
		{d, 18 * time.Hour, 200, 300, nil},
		{d, 17 * time.Hour, 200, 400, nil},
		{d, 50 * time.Minute, 200, 50, nil},
		{d, 40 * time.Minute, 500, 60, "HTTP 500"},
		{d, 30 * time.Minute, nil, 10000, "context deadline exceeded"},
		{d, 20 * time.Minute, 503, 70, nil},
		{o, 10 * time.Minute, 200, 1, nil}, // another endpoint's success does not end the streak
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, error, created_at)
			VALUES ($1, 1, $2, $3, $4, now() - $5::interval)`, a.id, a.code, a.ms, a.err, a.ago); err != nil {
			t.Fatal(err)
		}
	}
	h, err := EndpointHealth(ctx, pool, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	hour, day := h.Windows[0], h.Windows[1]
	if hour.Attempts != 4 || hour.Succeeded != 1 || hour.SuccessRate() != 0.25 || hour.P50 != 65*time.Millisecond {
		t.Errorf("last hour: %+v", hour)
	}
	if day.Attempts != 8 || day.Succeeded != 5 || day.P50 != 150*time.Millisecond || day.P99 < 9*time.Second {
		t.Errorf("last day: %+v", day)
	}
	if h.ConsecutiveFailures != 3 || h.LastError != "HTTP 503" || h.LastSuccessAt == nil || h.Endpoint.Secret != "" {
		t.Errorf("health: %d consecutive, last error %q, last success %v", h.ConsecutiveFailures, h.LastError, h.LastSuccessAt)
	}
	if _, err := EndpointHealth(ctx, pool, "00000000-0000-4000-8000-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown endpoint: %v", err)
	}
	if (HealthWindow{}).SuccessRate() != 0 {
		t.Error("no attempts: a rate")
	}
}
