package webhook

import (
	"context"
	"slices"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// An endpoint whose breaker lets nothing more out now has its due
// deliveries skipped by the retry claim's candidates, not locked and
// turned away one claim after another: a backlog of them, due before
// everyone else's, must not fill the claim and starve a healthy endpoint's
// deliveries. Half-open, that is the rows past its probe slots (one, which
// a leased probe fills); recovering, the never-attempted rows while its
// slow start lets no first attempt out (two successes against eight
// failures in its window, at the default 80 %) — its retries still go.
func TestBreaker_BacklogDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		state    string // SET clause on the endpoint
		probe    bool   // a probe in flight
		attempts int    // the backlog's
		retry    bool   // a retry due behind the backlog, which is claimed
	}{
		{"half-open, its probe slot full", `paused_until = now() - interval '1 second', breaker_window_at = now(), breaker_requests = 3, breaker_failures = 3`,
			true, 1, false},
		{"recovering, no first attempt fits", `breaker_recovering = true, breaker_window_at = now(), breaker_requests = 10, breaker_failures = 8`,
			false, 0, true},
		// Concurrency 1: its one attempt unresolved, failed and waiting.
		{"unproven, its cap of attempts unresolved", `proven_at = NULL`, false, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			p := newDispatcher(t, pool, func(c *Config) { c.Settings.Concurrency = 1 })
			held := provenEndpoint(t, pool, "http://127.0.0.1:9/held")
			healthy := provenEndpoint(t, pool, "http://127.0.0.1:9/healthy")
			if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET `+tc.state+` WHERE id = $1`, held.ID); err != nil {
				t.Fatal(err)
			}
			if tc.probe {
				backlogDelivery(t, pool, held.ID, 1, "1 minute", "1 minute")
			}
			var backlog, want []string
			for range 10 {
				backlog = append(backlog, backlogDelivery(t, pool, held.ID, tc.attempts, "-10 seconds", "-1 minute"))
			}
			if tc.retry {
				// Due, so it also counts as the unproven endpoint's
				// attempt unresolved.
				want = append(want, backlogDelivery(t, pool, held.ID, 1, "-5 seconds", "-1 minute"))
			}
			want = append(want, backlogDelivery(t, pool, healthy.ID, 0, "-1 second", "-1 minute"))
			got := claimedIDs(t, p)
			for _, id := range want {
				if !slices.Contains(got, id) {
					t.Fatalf("claimed %v: %s, due behind the held backlog, was not among them", got, id)
				}
			}
			for _, id := range backlog {
				if slices.Contains(got, id) {
					t.Fatalf("claimed %v: the held backlog's %s among them", got, id)
				}
			}
		})
	}
}

// backlogDelivery inserts a delivery of a new event to endpoint with
// attempts made (a failed one's error when above zero), due and leased
// until now plus the intervals given ("-1 minute": not leased).
func backlogDelivery(t *testing.T, db DB, endpoint string, attempts int, due, lease string) string {
	t.Helper()
	var id string
	if err := db.QueryRow(context.Background(), `WITH ev AS (INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id)
INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, last_error, next_retry_at, leased_until)
SELECT ev.id, $1, $2, CASE WHEN $2 > 0 THEN 'HTTP 500' END, now() + $3::interval, now() + $4::interval FROM ev RETURNING id`,
		endpoint, attempts, due, lease).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
