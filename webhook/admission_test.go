package webhook

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/tooling/testsupport/envtest"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Tests of the retry claim's admission and of the breaker's bounds that a
// mutation pass found unguarded: the bucket's floor
// of one token, the breaker's maximum cool-down, outcomes with no request
// kept out of the breaker, the throttled backlog pushed off the claim's
// head, and which of the bucket, the in-flight cap and the probe decides
// when more than one holds rows back. None of them times anything: where
// the clock matters they wait for at least some time to pass (waitPast),
// and a slower machine only lets more pass, which the assertions allow.

// insertDueDeliveries inserts n pending deliveries to endpointID, each with
// its own event, due ago in the past, and returns their ids.
func insertDueDeliveries(t *testing.T, db DB, endpointID string, n int, ago time.Duration) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `WITH ev AS (
	INSERT INTO webhook_events (event_type, payload) SELECT 'invoice.paid', '{}' FROM generate_series(1, $2) RETURNING id)
INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at)
SELECT id, $1, now() - $3::interval FROM ev
RETURNING id`, endpointID, n, ago)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// fillBucket makes endpointID's bucket as full as it can be: its last
// taking an hour ago, so an hour's refill — far past any burst — is due,
// on top of the tokens it kept then. SetLimits starts a bucket empty; this
// stands for a limit set long ago.
func fillBucket(t *testing.T, db DB, endpointID string, tokens float64) {
	t.Helper()
	if _, err := db.Exec(context.Background(),
		`UPDATE webhook_endpoints SET rl_tokens = $2, rl_at = now() - interval '1 hour' WHERE id = $1`, endpointID, tokens); err != nil {
		t.Fatal(err)
	}
}

// claimIDs runs one retry claim of at most n rows and returns the ids it
// leased (for an hour: nothing is attempted, the lease only keeps them).
func claimIDs(t *testing.T, p *Dispatcher, n int) []string {
	t.Helper()
	got, _, err := p.claimAdmitted(context.Background(), n, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(got))
	for i, c := range got {
		ids[i] = c.ID
	}
	return ids
}

// dueCount counts endpointID's pending deliveries that are due and not
// leased: those a claim would look at now.
func dueCount(t *testing.T, db DB, endpointID string) int {
	t.Helper()
	return count(t, db, `SELECT count(*) FROM webhook_deliveries
WHERE endpoint_id = $1 AND status = 'pending' AND next_retry_at <= now() AND leased_until IS NULL`, endpointID)
}

// earliestPending is the due time of endpointID's next unleased pending
// delivery.
func earliestPending(t *testing.T, db DB, endpointID string) time.Time {
	t.Helper()
	var at time.Time
	if err := db.QueryRow(context.Background(), `SELECT min(next_retry_at) FROM webhook_deliveries
WHERE endpoint_id = $1 AND status = 'pending' AND leased_until IS NULL`, endpointID).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// An endpoint limited below 2 requests/s would hold less than one token
// at half a second's worth (burstSeconds), and a claim admits whole
// tokens only: without the bucket's floor of one token it would never be
// sent to. With it, such an endpoint gets exactly one delivery from a
// bucket that has refilled for an hour — the floor, no burst past it —
// and one more once a token's worth of time (1/rate) has passed. A limit
// of 4/s shows the floor is a floor: its burst is half a second's worth,
// two.
func TestRateLimit_BelowTwoPerSecondOneTokenFloor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int // max(1, rate × burstSeconds), whole tokens
	}{
		{"1/s", 1, 1},
		{"0.5/s", 0.5, 1},
		{"1.9/s", 1.9, 1},
		{"4/s: half a second's worth", 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ep := createEndpoint(t, pool, "https://hooks.example.com/slow")
			rate := tc.rate
			if err := SetLimits(ctx, pool, ep.ID, Limits{RateLimit: &rate}); err != nil {
				t.Fatal(err)
			}
			fillBucket(t, pool, ep.ID, 0)
			insertDueDeliveries(t, pool, ep.ID, 5, time.Minute)
			p := newDispatcher(t, pool, nil)

			if got := claimIDs(t, p, 10); len(got) != tc.burst {
				t.Fatalf("a bucket refilled for an hour admitted %d of 5 due deliveries at %v/s, want %d (max(1, rate × %v))",
					len(got), tc.rate, tc.burst, burstSeconds)
			}
			// The rest were pushed to when tokens come, the first 1/rate
			// from the claim: once it is due the bucket holds a token
			// again. However late this claim runs, the bucket holds no
			// more than the burst.
			waitPast(t, pool, earliestPending(t, pool, ep.ID))
			if got := claimIDs(t, p, 10); len(got) < 1 || len(got) > tc.burst {
				t.Fatalf("after 1/rate the claim admitted %d, want 1..%d: the endpoint is not starved", len(got), tc.burst)
			}
		})
	}
}

// A claim stores what it took from the bucket, in the endpoint's row,
// before it commits: the next claim, on any replica, reads the bucket as
// this one left it, which makes the limit pool-wide rather than per
// claim. TestRateLimit_HoldsAcrossDispatchers cannot see a lost taking
// for sure: the deliveries a claim defers are spaced at the rate too, so
// three replicas stay near the limit even then. The row is read straight
// after the claim, so no clock decides the outcome.
func TestRateLimit_ClaimStoresWhatItTook(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ep := createEndpoint(t, pool, "https://hooks.example.com/limited")
	rate := 20.0 // a burst of 10 (rate × burstSeconds)
	if err := SetLimits(ctx, pool, ep.ID, Limits{RateLimit: &rate}); err != nil {
		t.Fatal(err)
	}
	// Full both ways — a full burst of tokens, and an hour since the last
	// taking — so a claim that did not store its tokens, or its time,
	// leaves the row visibly as it found it.
	burst := int(rate * burstSeconds)
	fillBucket(t, pool, ep.ID, float64(burst))
	insertDueDeliveries(t, pool, ep.ID, 30, time.Minute)
	var before time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
		t.Fatal(err)
	}

	if got := claimIDs(t, newDispatcher(t, pool, nil), 30); len(got) != burst {
		t.Fatalf("a full bucket at %v/s admitted %d of 30, want its burst of %d", rate, len(got), burst)
	}
	var (
		tokens float64
		at     time.Time
	)
	if err := pool.QueryRow(ctx, `SELECT rl_tokens, rl_at FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&tokens, &at); err != nil {
		t.Fatal(err)
	}
	if tokens >= 1 || at.Before(before) {
		t.Fatalf("after a claim that emptied the bucket the row holds %v tokens taken at %s (claim began %s): "+
			"the taking was not stored, so the next claim on any replica would take the burst again", tokens, at, before)
	}
}

// The breaker's pause doubles with each reopening up to its cap
// (BreakerMaxCooldown, shipped as DefaultBreakerMaxCooldown = 1h), and
// the count of openings the doubling reads is itself bounded (30), so an
// endpoint failing for months neither pauses for years nor overflows.
// Each case starts half-open after `opens` openings, and its probe fails.
func TestBreaker_CooldownStopsAtItsCap(t *testing.T) {
	t.Parallel()
	configured := func(first, ceiling time.Duration) func(*Config) {
		return func(o *Config) { o.Settings.BreakerCooldown, o.Settings.BreakerMaxCooldown = first, ceiling }
	}
	for _, tc := range []struct {
		name      string
		edit      func(*Config) // nil: the shipped defaults, 30 s doubling up to 1 h
		opens     int
		pause     time.Duration
		wantOpens int
	}{
		{"shipped: 30 s × 2^5, under the cap", nil, 5, 16 * time.Minute, 6},
		{"shipped: 30 s × 2^7 stops at 1 h", nil, 7, time.Hour, 8},
		{"shipped: openings stay at their bound of 30", nil, 30, time.Hour, 30},
		{"configured: 10 s × 2^2, under a 1 min cap", configured(10*time.Second, time.Minute), 2, 40 * time.Second, 3},
		{"configured: 10 s × 2^3 stops at 1 min", configured(10*time.Second, time.Minute), 3, time.Minute, 4},
		{"configured: a cap below the first cool-down wins", configured(2*time.Minute, time.Minute), 0, time.Minute, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusInternalServerError) })
			ep := createEndpoint(t, pool, rc.URL)
			p := newDispatcher(t, pool, tc.edit)
			// Half-open: the pause over, no probe out, a fresh trial.
			// failing_since is left for the failure to stamp: it is
			// the now() of the very statement that sets paused_until, so
			// paused_until − failing_since is the pause that statement
			// chose, however slow the machine.
			if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET consecutive_failures = 20, breaker_opens = $2,
	paused_until = now() - interval '1 second', probing = false, failing_since = NULL, breaker_window_at = now() WHERE id = $1`,
				ep.ID, tc.opens); err != nil {
				t.Fatal(err)
			}
			insertDueDeliveries(t, pool, ep.ID, 2, time.Minute)
			if _, err := p.DrainRetries(ctx, testWindow); err != nil {
				t.Fatal(err)
			}
			if n := len(rc.requests()); n != 1 {
				t.Fatalf("receiver got %d requests, want the one probe", n)
			}
			b := endpointBreaker(t, pool, ep.ID)
			var since time.Time
			if err := pool.QueryRow(ctx, `SELECT failing_since FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&since); err != nil {
				t.Fatal(err)
			}
			if b.PausedUntil == nil {
				t.Fatalf("after the failed probe: %+v, want reopened", b)
			}
			if got := b.PausedUntil.Sub(since); got < tc.pause || got > tc.pause+5*time.Second {
				t.Fatalf("failed probe after %d openings paused the endpoint for %s, want %s", tc.opens, got, tc.pause)
			}
			if b.Opens != tc.wantOpens {
				t.Fatalf("breaker_opens = %d after the reopening, want %d", b.Opens, tc.wantOpens)
			}
		})
	}
}

// The shipped breaker figures, and the environment's bound on them: a cap
// below the first cool-down is refused, naming both variables; a cap equal
// to it is a breaker that never doubles, and allowed. The rate, the
// minimum, the window and the probes are refused out of their ranges,
// naming the variable, and the old streak setting is refused, not ignored.
func TestBreakerSettings_FromEnv(t *testing.T) {
	t.Parallel()
	env := envtest.Lookup
	for _, tc := range []struct {
		name           string
		lookup         func(string) (string, bool)
		first, ceiling time.Duration
		wantErr        string
	}{
		{"defaults", env(), 30 * time.Second, time.Hour, ""},
		{"cap set", env(EnvBreakerMaxCooldown, "10m"), 30 * time.Second, 10 * time.Minute, ""},
		{"cap equal to the first", env(EnvBreakerCooldown, "1m", EnvBreakerMaxCooldown, "1m"), time.Minute, time.Minute, ""},
		{"cap below the first", env(EnvBreakerCooldown, "1m", EnvBreakerMaxCooldown, "30s"), 0, 0,
			EnvBreakerMaxCooldown + "=30s: must be at least " + EnvBreakerCooldown + "=1m0s"},
		{"cap below the shipped first", env(EnvBreakerMaxCooldown, "10s"), 0, 0, EnvBreakerMaxCooldown},
		{"rate at its edges", env(EnvBreakerFailureRate, "100", EnvBreakerMinRequests, "1000000", EnvBreakerWindow, "24h", EnvBreakerProbes, "1000"), 30 * time.Second, time.Hour, ""},
		{"rate over 100", env(EnvBreakerFailureRate, "101"), 0, 0, EnvBreakerFailureRate + "=101: must be in 1..100"},
		{"rate zero", env(EnvBreakerFailureRate, "0"), 0, 0, EnvBreakerFailureRate},
		{"minimum past its bound", env(EnvBreakerMinRequests, "1000001"), 0, 0, EnvBreakerMinRequests},
		{"probes past their bound", env(EnvBreakerProbes, "1001"), 0, 0, EnvBreakerProbes},
		{"window under a second", env(EnvBreakerWindow, "500ms"), 0, 0, EnvBreakerWindow},
		{"window past a day", env(EnvBreakerWindow, "25h"), 0, 0, EnvBreakerWindow},
		{"the old streak setting", env("WEBHOOK_BREAKER_FAILURES", "5"), 0, 0, "WEBHOOK_BREAKER_FAILURES=\"5\": no longer read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := SettingsFromEnv(tc.lookup)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("SettingsFromEnv error = %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("SettingsFromEnv: %v", err)
			case tc.name == "defaults" && (c.BreakerFailureRate != 80 || c.BreakerMinRequests != 20 || c.BreakerWindow != time.Minute || c.BreakerProbes != 5):
				t.Fatalf("shipped breaker %d%% of %d in %s, %d probes; want 80%% of 20 in 1m, 5 probes",
					c.BreakerFailureRate, c.BreakerMinRequests, c.BreakerWindow, c.BreakerProbes)
			case c.BreakerCooldown != tc.first || c.BreakerMaxCooldown != tc.ceiling:
				t.Fatalf("breaker cool-down %s up to %s, want %s up to %s", c.BreakerCooldown, c.BreakerMaxCooldown, tc.first, tc.ceiling)
			}
		})
	}
}

// An outcome for which no request was made — the attempt refused before
// sending (production's https rule on an endpoint row written outside
// it), or the endpoint disabled between the claim and the attempt — says
// nothing about the receiver, so it must not count toward the breaker
// (Result.Attempt is zero for them). The minimum is one request,
// so a single failure counted would open it; the last step shows a real
// failed request does.
func TestBreaker_NoRequestMadeCountsNoFailure(t *testing.T) {
	t.Parallel()
	oneFailure := func(o *Config) { o.Settings.BreakerMinRequests = 1 }
	wantClosed := func(t *testing.T, db DB, id string) {
		t.Helper()
		if b := endpointBreaker(t, db, id); b.Failures != 0 || b.Opens != 0 || b.PausedUntil != nil || b.Requests != 0 {
			t.Fatalf("breaker after outcomes with no request: %+v, want closed with no failure counted", b)
		}
	}

	t.Run("refused before sending", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		pool := pgtest.NewPool(t)
		rc := newReceiver(t, nil)
		ep := createEndpoint(t, pool, rc.URL) // plain http, created outside production
		p := newDispatcher(t, pool, func(o *Config) { oneFailure(o); o.Settings.Production = true })
		for i := range 3 {
			insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
		}
		if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Failed != 3 {
			t.Fatalf("Drain = %+v, %v; want the 3 deliveries failed by the https rule", sum, err)
		}
		if n := len(rc.requests()); n != 0 {
			t.Fatalf("receiver got %d requests, want none", n)
		}
		wantClosed(t, pool, ep.ID)
	})

	t.Run("endpoint disabled after the claim", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		pool := pgtest.NewPool(t)
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusBadGateway) })
		ep := createEndpoint(t, pool, rc.URL)
		p := newDispatcher(t, pool, func(o *Config) { oneFailure(o); o.Backoff = shortSchedule })
		insertDueDeliveries(t, pool, ep.ID, 3, time.Minute)
		ds, _, err := p.claimRetries(ctx, 10, nil)
		if err != nil || len(ds) != 3 {
			t.Fatalf("claim = %d deliveries, %v; want 3", len(ds), err)
		}
		if err := DisableEndpoint(ctx, pool, ep.ID, "maintenance"); err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			d.enabled = false // as the claim's load would have read it a moment later
			if sum, _ := p.attempt(ctx, d, trace.SpanContext{}, false); sum.Retried != 1 {
				t.Fatalf("attempt on a disabled endpoint = %+v, want held pending", sum)
			}
		}
		if n := len(rc.requests()); n != 0 {
			t.Fatalf("receiver got %d requests, want none", n)
		}
		wantClosed(t, pool, ep.ID)

		// The same endpoint, enabled, failing for real: one request
		// counted opens it.
		if err := EnableEndpoint(ctx, pool, ep.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := p.DrainRetries(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		if b := endpointBreaker(t, pool, ep.ID); len(rc.requests()) == 0 || b.Failures < 1 || b.PausedUntil == nil {
			t.Fatalf("after %d failed requests: %+v, want the breaker open", len(rc.requests()), b)
		}
	})
}

// A throttled endpoint's due backlog leaves the head of the claim at once:
// the claim that finds its bucket short pushes every due row of it — not
// only that claim's candidates — spread at its rate and no further than
// maxThrottlePush. So an unlimited endpoint's rows, due after a 300-row
// backlog of a 1/s endpoint, are all claimed by the next claim, even when
// that claim finds a token in the bucket again: without the push the
// backlog would still be the claim's first candidates, and each claim
// would take them, admit one and leave the others behind them. (With the
// bucket empty the candidates' filter skips the backlog anyway, which is
// why the second claim waits for a token.) Claims are counted, not timed.
func TestRateLimit_ThrottledBacklogLeavesTheClaimsHead(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	limited := createEndpoint(t, pool, "https://hooks.example.com/limited")
	free := createEndpoint(t, pool, "https://hooks.example.com/free")
	rate := 1.0
	if err := SetLimits(ctx, pool, limited.ID, Limits{RateLimit: &rate}); err != nil {
		t.Fatal(err)
	}
	fillBucket(t, pool, limited.ID, 0)
	const backlog, others, n = 300, 20, 25
	insertDueDeliveries(t, pool, limited.ID, backlog, time.Hour) // the head of the claim
	freeIDs := insertDueDeliveries(t, pool, free.ID, others, time.Minute)
	p := newDispatcher(t, pool, nil)

	if got := claimIDs(t, p, n); len(got) != 1 {
		t.Fatalf("first claim took %d, want the 1 the limited endpoint's bucket admits", len(got))
	}
	if due := dueCount(t, pool, limited.ID); due != 0 {
		t.Fatalf("%d of the limited endpoint's %d rows still due after the claim that throttled it, want 0: the whole backlog is pushed",
			due, backlog-1)
	}
	var furthest time.Duration
	if err := pool.QueryRow(ctx, `SELECT max(next_retry_at) - clock_timestamp() FROM webhook_deliveries
WHERE endpoint_id = $1 AND leased_until IS NULL`, limited.ID).Scan(&furthest); err != nil {
		t.Fatal(err)
	}
	// A literal, not maxThrottlePush: the test pins the shipped bound.
	if furthest > time.Minute {
		t.Fatalf("a throttled row was pushed %s ahead, want at most a minute (maxThrottlePush)", furthest)
	}

	// The bucket holds a token again once the first pushed row is due.
	waitPast(t, pool, earliestPending(t, pool, limited.ID))
	got := claimIDs(t, p, n)
	claimed := map[string]bool{}
	for _, id := range got {
		claimed[id] = true
	}
	missing := 0
	for _, id := range freeIDs {
		if !claimed[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("second claim took %d rows and left %d of the unlimited endpoint's %d behind the throttled backlog", len(got), missing, others)
	}
}

// When the bucket and the in-flight cap or the breaker's probe both hold
// rows back, the cap or the probe decides: rows they hold wait for a slot
// or the probe's answer, which the clock does not bring, so they stay due
// (the candidates' filter skips them meanwhile) instead of being pushed to
// the bucket's schedule, and the bucket gives only the token taken by the
// one admitted. A 10/s bucket refilled for an hour holds 5 tokens; 8 rows
// are due, so the bucket alone would admit 5 and push 3.
func TestAdmission_CapAndProbeOutrankTheBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup string // on the endpoint ($1), after its limits
	}{
		{"in-flight cap of one", `UPDATE webhook_endpoints SET max_in_flight = 1 WHERE id = $1`},
		{"breaker half-open", `UPDATE webhook_endpoints SET consecutive_failures = 20, breaker_opens = 1,
	failing_since = now(), paused_until = now() - interval '1 second', breaker_window_at = now() WHERE id = $1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ep := createEndpoint(t, pool, "https://hooks.example.com/held")
			rate := 10.0
			if err := SetLimits(ctx, pool, ep.ID, Limits{RateLimit: &rate}); err != nil {
				t.Fatal(err)
			}
			fillBucket(t, pool, ep.ID, 0)
			if _, err := pool.Exec(ctx, tc.setup, ep.ID); err != nil {
				t.Fatal(err)
			}
			insertDueDeliveries(t, pool, ep.ID, 8, time.Minute)
			p := newDispatcher(t, pool, nil) // half-open with no success yet: one probe slot

			if got := claimIDs(t, p, 10); len(got) != 1 {
				t.Fatalf("claim took %d, want 1", len(got))
			}
			if due := dueCount(t, pool, ep.ID); due != 7 {
				t.Fatalf("%d of the 7 rows held back still due, want all 7: the bucket's push is for rows the bucket held", due)
			}
			var tokens float64
			if err := pool.QueryRow(ctx, `SELECT rl_tokens FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&tokens); err != nil {
				t.Fatal(err)
			}
			if want := 5.0 - 1; math.Abs(tokens-want) > 1e-9 { // the 5 the bucket held, less the one admitted
				t.Fatalf("bucket left with %v tokens, want %v: only the admitted one is taken", tokens, want)
			}
		})
	}
}
