package webhook

import (
	"context"
	"slices"
	"testing"

	"github.com/postbox/postbox/internal/testsupport/pgtest"
)

// A half-open endpoint whose probe slots are taken has its due deliveries
// skipped by the retry claim's candidates, not locked and turned away
// one claim after another: a backlog of them, due before everyone else's,
// must not fill the claim and starve a healthy endpoint's retries.
func TestBreaker_HalfOpenBacklogDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	halfOpen := createEndpoint(t, pool, "http://127.0.0.1:9/half-open")
	healthy := createEndpoint(t, pool, "http://127.0.0.1:9/healthy")
	// Half-open (its pause is over) with one probe slot, which a leased
	// probe fills.
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET paused_until = now() - interval '1 second',
	breaker_window_at = now(), breaker_requests = 3, breaker_failures = 3 WHERE id = $1`, halfOpen.ID); err != nil {
		t.Fatal(err)
	}
	delivery := func(endpoint, due, lease string) string {
		t.Helper()
		var id string
		if err := pool.QueryRow(ctx, `WITH ev AS (INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id)
INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at, leased_until)
SELECT ev.id, $1, 1, now() + $2::interval, now() + $3::interval FROM ev RETURNING id`, endpoint, due, lease).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	delivery(halfOpen.ID, "1 minute", "1 minute") // the probe in flight
	for range 10 {
		delivery(halfOpen.ID, "-10 seconds", "-1 minute") // due first
	}
	want := delivery(healthy.ID, "-1 second", "-1 minute")

	got := claimedIDs(t, p)
	found := false
	for _, id := range got {
		if id == want {
			found = true
		}
	}
	if !found {
		t.Fatalf("claimed %v: the healthy endpoint's due delivery %s was not among them", got, want)
	}
}

// The same for a recovering endpoint whose slow start lets no first
// attempt out now (two successes against eight failures in its window, at
// the default 80 %): its never-attempted backlog, due before everyone
// else's, is skipped by the candidates, so a healthy endpoint's due
// delivery is claimed; its retries still are.
func TestBreaker_RecoveringBacklogDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	recovering := createEndpoint(t, pool, "http://127.0.0.1:9/recovering")
	healthy := createEndpoint(t, pool, "http://127.0.0.1:9/healthy")
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET breaker_recovering = true,
	breaker_window_at = now(), breaker_requests = 10, breaker_failures = 8 WHERE id = $1`, recovering.ID); err != nil {
		t.Fatal(err)
	}
	delivery := func(endpoint string, attempts int, due string) string {
		t.Helper()
		var id string
		if err := pool.QueryRow(ctx, `WITH ev AS (INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id)
INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, last_error, next_retry_at)
SELECT ev.id, $1, $2, CASE WHEN $2 > 0 THEN 'HTTP 500' END, now() + $3::interval FROM ev RETURNING id`, endpoint, attempts, due).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for range 10 {
		delivery(recovering.ID, 0, "-10 seconds") // held first attempts, due first
	}
	retry := delivery(recovering.ID, 1, "-5 seconds")
	want := delivery(healthy.ID, 0, "-1 second")
	if got := claimedIDs(t, p); !slices.Equal(got, sorted(retry, want)) {
		t.Fatalf("claimed %v, want the recovering endpoint's retry and the healthy endpoint's delivery %v", got, sorted(retry, want))
	}
}
