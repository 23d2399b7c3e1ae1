package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// shortSchedule retries every 50 ms, twenty times: the breaker, not the
// schedule, paces these tests.
var shortSchedule = func() []time.Duration {
	s := make([]time.Duration, 20)
	for i := range s {
		s[i] = 50 * time.Millisecond
	}
	return s
}()

type breakerState struct {
	Failures       int // consecutive_failures: the run since the last success
	Opens          int
	PausedUntil    *time.Time
	Probing        bool
	Enabled        bool
	Reason         string
	Requests       int // the window's (or the half-open trial's) counts
	WindowFailures int
	Recovering     bool
}

func endpointBreaker(t *testing.T, db DB, id string) breakerState {
	t.Helper()
	var b breakerState
	if err := db.QueryRow(context.Background(), `SELECT consecutive_failures, breaker_opens, paused_until, probing, enabled, coalesce(disabled_reason, ''),
	breaker_requests, breaker_failures, breaker_recovering
FROM webhook_endpoints WHERE id = $1`, id).Scan(&b.Failures, &b.Opens, &b.PausedUntil, &b.Probing, &b.Enabled, &b.Reason,
		&b.Requests, &b.WindowFailures, &b.Recovering); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitPast waits until the database clock is past at.
func waitPast(t *testing.T, db DB, at time.Time) {
	t.Helper()
	eventually.Until(t, "the database clock past "+at.Format(time.RFC3339Nano), time.Until(at)+time.Minute,
		func() bool { return dbNow(t, db).After(at) })
}

// deliverAll enqueues events and runs the fan-out and the retry lane of
// two dispatchers (edit applied, on shortSchedule) until every delivery
// succeeded, failing the test if that takes past a generous deadline (the
// breaker's pauses are a second at most here). It returns how many times
// the breaker opened.
func deliverAll(t *testing.T, db *pgxpool.Pool, events int, edit func(*Config)) (opens float64) {
	t.Helper()
	ctx := testCtx(t)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	configure := func(o *Config) {
		o.Backoff = shortSchedule
		o.Metrics = metrics
		edit(o)
	}
	ps := []*Dispatcher{newDispatcher(t, db, configure), newDispatcher(t, db, configure)}
	for i := range events {
		insertOutbox(t, db, "invoice.paid", map[string]any{"n": i})
	}
	deadline := time.Now().Add(60 * time.Second)
	for count(t, db, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`) < events {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d delivered before the deadline", count(t, db, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`), events)
		}
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Go(func() {
				if _, err := p.Drain(ctx, testWindow); err != nil {
					t.Error(err)
				}
				if _, err := p.RunRetries(ctx, 200*time.Millisecond); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	return counterValue(t, reg, "postbox_webhook_breaker_open_total")
}

// An endpoint answering 500 to everything: its first failures are counted
// in a window, and once the window holds the minimum of requests, all
// failed, the breaker opens. Open, new events are born held and nothing
// goes out — no first attempt either. Half-open, exactly one probe goes
// out; its failure reopens the breaker for twice as long. Once the
// receiver recovers, the probes succeed, one more going out at once per
// success, and BreakerProbes successes close the breaker: the held
// deliveries follow.
func TestBreaker_OpensOnFailureRateAndProbesClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	edit := func(o *Config) {
		o.Settings.BreakerMinRequests = 5
		o.Settings.BreakerProbes = 2
		o.Settings.BreakerCooldown = time.Second
		o.Backoff = shortSchedule
	}
	p, sibling := newDispatcher(t, pool, edit), newDispatcher(t, pool, edit)
	var healthy atomic.Bool
	var probeAt atomic.Int64
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if probeAt.CompareAndSwap(0, time.Now().UnixNano()) {
			time.Sleep(300 * time.Millisecond) // simulates: a slow probe: nothing else may go out meanwhile
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, pool, rc.URL)
	for i := range 5 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	b := endpointBreaker(t, pool, ep.ID)
	if len(rc.requests()) != 5 || b.Failures != 5 || b.Opens != 1 || b.PausedUntil == nil || b.Requests != 0 {
		t.Fatalf("after %d failed requests: %+v, want open (5 failures, 1 opening, paused, a fresh trial)", len(rc.requests()), b)
	}
	// Open: a new event is born held, and nothing goes out.
	for i := range 3 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 10 + i})
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE attempts = 0 AND leased_until IS NULL`); n != 3 {
		t.Fatalf("%d of the 3 deliveries born while open are held", n)
	}
	if _, err := p.RunRetries(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := len(rc.requests()); n != 5 {
		t.Fatalf("receiver got %d requests while the breaker was open, want 5", n)
	}
	attemptsOpen := count(t, pool, `SELECT sum(attempts) FROM webhook_deliveries`)

	// Half-open, the probe fails: one request, reopened for 2 s.
	waitPast(t, pool, *b.PausedUntil)
	if _, err := p.DrainRetries(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if n := len(rc.requests()); n != 6 {
		t.Fatalf("receiver got %d requests, want 6: exactly one probe", n)
	}
	b = endpointBreaker(t, pool, ep.ID)
	if left := b.PausedUntil.Sub(dbNow(t, pool)); b.Opens != 2 || left < 1500*time.Millisecond || left > 2*time.Second {
		t.Fatalf("after a failed probe: %+v (%s left), want reopened for about 2 s", b, left)
	}
	if got := count(t, pool, `SELECT sum(attempts) FROM webhook_deliveries`); got != attemptsOpen+1 {
		t.Fatalf("attempts %d, want %d: only the probe spends one", got, attemptsOpen+1)
	}

	// The receiver recovers; the probes succeed and the rest follow, on
	// either dispatcher, only after the first probe's answer.
	healthy.Store(true)
	waitPast(t, pool, *b.PausedUntil)
	var wg sync.WaitGroup
	for _, d := range []*Dispatcher{p, sibling} {
		wg.Go(func() { _, _ = d.RunRetries(ctx, 2*time.Second) })
	}
	wg.Wait()
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`); n != 8 {
		t.Fatalf("%d of 8 delivered after the breaker closed", n)
	}
	probe := time.Unix(0, probeAt.Load())
	for _, r := range rc.requests()[6:] {
		if d := r.At.Sub(probe); d > 0 && d < 300*time.Millisecond {
			t.Fatalf("a request %s after the first probe, before its answer: want one probe out at first", d)
		}
	}
	// Closed, recovering for a window: its successes counted, the pause's
	// doubling kept until the phase ends.
	if b := endpointBreaker(t, pool, ep.ID); b.Failures != 0 || b.Opens != 2 || b.PausedUntil != nil || b.Probing || !b.Recovering || b.Requests != 8 || b.WindowFailures != 0 {
		t.Fatalf("after the probes succeeded: %+v, want closed and recovering, 8 successes counted", b)
	}
}

// Fewer failed requests than the window's minimum never open the breaker,
// all failed as they are, and the request that reaches the minimum opens
// it.
func TestBreaker_MinimumRequestsBeforeTheRateCounts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusInternalServerError) })
	ep := createEndpoint(t, pool, rc.URL)
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.BreakerMinRequests = 5
		o.Backoff = []time.Duration{time.Hour} // no retry comes due: the fan-out's attempts are the requests
	})
	for i := range 4 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	b := endpointBreaker(t, pool, ep.ID)
	if len(rc.requests()) != 4 || b.PausedUntil != nil || b.Requests != 4 || b.WindowFailures != 4 {
		t.Fatalf("after %d failed requests, under the minimum of 5: %+v, want closed with 4 of 4 counted", len(rc.requests()), b)
	}
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 4})
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if b := endpointBreaker(t, pool, ep.ID); len(rc.requests()) != 5 || b.PausedUntil == nil || b.Opens != 1 {
		t.Fatalf("after %d failed requests: %+v, want open", len(rc.requests()), b)
	}
}

// An endpoint that fails every other request is alive: the failed share
// of its window stays near half, under the rate, so the breaker never
// opens and every delivery goes out on the schedule alone. Two
// dispatchers deliver at once (deliverAll).
func TestBreaker_FlakyEndpointIsNotPaused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, pool, rc.URL)
	if v := deliverAll(t, pool, 40, func(o *Config) { o.Settings.BreakerMinRequests = 10 }); v != 0 {
		t.Fatalf("breaker opened %v times on an endpoint failing every other request", v)
	}
	if b := endpointBreaker(t, pool, ep.ID); b.Opens != 0 || b.PausedUntil != nil {
		t.Fatalf("breaker %+v, want never opened", b)
	}
}

// failFirstReceiver answers 500 to the first request of every event and
// 204 to the ones after.
func failFirstReceiver(t *testing.T) *receiver {
	var mu sync.Mutex
	seen := map[string]bool{}
	return newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		first := !seen[r.Header.Get(HeaderID)]
		seen[r.Header.Get(HeaderID)] = true
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// An endpoint that fails the first attempt of every message and accepts
// the retry: its first failures open the breaker, and the probes — taken
// from the deliveries already attempted — succeed, so it closes, and every
// message is delivered.
func TestBreaker_FailFirstAttemptEndpointGetsEveryMessage(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	rc := failFirstReceiver(t)
	createEndpoint(t, pool, rc.URL)
	opens := deliverAll(t, pool, 30, func(o *Config) {
		o.Settings.BreakerMinRequests = 3
		o.Settings.BreakerCooldown = 200 * time.Millisecond
		o.Settings.BreakerMaxCooldown = time.Second
	})
	if v := opens; v < 1 {
		t.Fatalf("breaker opened %v times: the first failures should have opened it", v)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE attempts > 2`); n != 0 {
		t.Fatalf("%d deliveries needed more than two attempts: a probe was a first attempt", n)
	}
}

// A breaker that has just closed lets the deliveries held while it was
// open out in a slow start. To an endpoint that fails every first attempt
// and accepts the retry, all of them at once would fail together and
// reopen it (measured in the pool: 21 of 300 messages delivered in 120 s).
// Recovering, the first claim sends only as many first attempts as could
// all fail without the window's failed share reaching the opening rate —
// 7 after the 2 probe successes that closed it, at 80 % — each retry's
// success lets more out, and every message is delivered without the
// breaker opening again.
func TestBreaker_ClosedBreakerLetsHeldFirstAttemptsOutInASlowStart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	rc := failFirstReceiver(t)
	ep := provenEndpoint(t, pool, rc.URL) // its probes succeeded; an unproven one would need admission anyway
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.BreakerMinRequests = 3
		o.Settings.BreakerProbes = 2
		o.Backoff = shortSchedule
	})
	// As the second probe's success leaves it.
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET breaker_recovering = true, breaker_window_at = now(), breaker_requests = 2
	WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	const held = 40
	insertDueDeliveries(t, pool, ep.ID, held, time.Second)
	if _, err := p.DrainRetries(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if n := len(rc.requests()); n != 7 {
		t.Fatalf("the first claim after the breaker closed sent %d first attempts of %d held, want 7", n, held)
	}
	eventually.Until(t, fmt.Sprintf("all %d held deliveries delivered", held), 2*time.Minute, func() bool {
		if count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`) >= held {
			return true
		}
		if b := endpointBreaker(t, pool, ep.ID); b.PausedUntil != nil {
			t.Fatalf("the breaker opened again (%+v) after %d requests", b, len(rc.requests()))
		}
		if _, err := p.DrainRetries(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		return false
	})
	if n := len(rc.requests()); n != 2*held {
		t.Fatalf("%d requests for %d messages, want two each", n, held)
	}
}

// A half-open breaker's probe is a delivery already attempted, even when
// never-attempted deliveries of the endpoint are due before it in the
// claim's order; its one probe slot admits one.
func TestBreaker_ProbesPreferAttemptedDeliveries(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	rc := newReceiver(t, nil)
	ep := provenEndpoint(t, pool, rc.URL) // an unproven one puts attempted deliveries first anyway
	p := newDispatcher(t, pool, nil)
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET consecutive_failures = 20, failing_since = now(), breaker_opens = 1,
	paused_until = now() - interval '1 second', breaker_window_at = now() WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	insertDueDeliveries(t, pool, ep.ID, 5, time.Minute) // held, never attempted, due first
	attempted := insertDueDeliveries(t, pool, ep.ID, 1, time.Second)[0]
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET attempts = 1, last_error = 'HTTP 500' WHERE id = $1`, attempted); err != nil {
		t.Fatal(err)
	}
	var eventID string
	if err := pool.QueryRow(ctx, `SELECT event_id FROM webhook_deliveries WHERE id = $1`, attempted).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DrainRetries(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	got := rc.requests()
	if len(got) != 1 {
		t.Fatalf("half-open with no success yet sent %d probes, want 1", len(got))
	}
	if id := got[0].Header.Get(HeaderID); id != eventID {
		t.Fatalf("the probe was event %s, want the attempted delivery's %s", id, eventID)
	}
}

// A receiver failing past the window is disabled with a reason; the
// endpoint.disabled notice, enqueued with the disable, reaches the
// operator endpoint (and no other); the held deliveries are not lost and go
// out once the endpoint is enabled again.
func TestBreaker_DisablesAfterWindowAndNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	opsRC, bystanderRC := newReceiver(t, nil), newReceiver(t, nil)
	ops := createEndpoint(t, pool, opsRC.URL, "ops.only")
	createEndpoint(t, pool, bystanderRC.URL, EventEndpointDisabled)
	rc, healthy := newFailingReceiver(t, http.StatusBadGateway)
	failing := createEndpoint(t, pool, rc.URL, "invoice.paid")
	reg := prometheus.NewRegistry()
	var notified []EndpointDisabled
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.BreakerMinRequests = 2
		o.Settings.BreakerCooldown = 100 * time.Millisecond
		o.Settings.BreakerMaxCooldown = 200 * time.Millisecond
		o.Settings.DisableAfter = 1500 * time.Millisecond
		o.Settings.OpsEndpointID = ops.ID
		o.Backoff = shortSchedule
		o.Metrics = NewMetrics(reg)
		o.OnDisable = func(ctx context.Context, tx pgx.Tx, d EndpointDisabled) error {
			notified = append(notified, d)
			return nil
		}
	})
	for i := range 2 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(opsRC.requests()) == 0 && time.Now().Before(deadline) {
		if _, err := p.Drain(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RunRetries(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	b := endpointBreaker(t, pool, failing.ID)
	if b.Enabled || !strings.Contains(b.Reason, "WEBHOOK_DISABLE_AFTER") {
		t.Fatalf("endpoint after failing past the window: %+v, want disabled with the reason", b)
	}
	got := opsRC.requests()
	if len(got) != 1 {
		t.Fatalf("operator endpoint got %d notices, want 1", len(got))
	}
	var notice struct {
		Type string           `json:"type"`
		Data EndpointDisabled `json:"data"`
	}
	if err := json.Unmarshal(got[0].Body, &notice); err != nil {
		t.Fatal(err)
	}
	if notice.Type != EventEndpointDisabled || notice.Data.EndpointID != failing.ID || notice.Data.Reason != b.Reason ||
		notice.Data.Cause != DisabledFailing || notice.Data.FailingSince.IsZero() || notice.Data.ConsecutiveFailures == 0 ||
		count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE id::text = $1 AND event_id::text = $2 AND endpoint_id = $3`,
			notice.Data.DeliveryID, notice.Data.EventID, failing.ID) != 1 {
		t.Fatalf("notice %+v, want %s for %s with the reason, the failure run and the delivery", notice, EventEndpointDisabled, failing.ID)
	}
	if len(notified) != 1 || notified[0].EndpointID != failing.ID {
		t.Fatalf("OnDisable saw %+v, want the one disable", notified)
	}
	if n := len(bystanderRC.requests()); n != 0 {
		t.Fatalf("an endpoint subscribed to %s got %d requests: the notice is addressed to the operator endpoint only", EventEndpointDisabled, n)
	}
	if v := counterValue(t, reg, "postbox_webhook_endpoints_disabled_total", "failing"); v != 1 {
		t.Fatalf("endpoints_disabled_total{reason=failing} = %v, want 1", v)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending'`, failing.ID); n != 2 {
		t.Fatalf("%d held deliveries, want 2: disabling loses none", n)
	}

	healthy.Store(true)
	if err := EnableEndpoint(ctx, pool, failing.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DrainRetries(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'succeeded'`, failing.ID); n != 2 {
		t.Fatalf("%d of 2 held deliveries sent after enabling", n)
	}
}

// An operator endpoint that belongs to a tenant is sent no notice — it
// would tell that tenant of another's endpoint — and the failing endpoint
// is disabled all the same.
func TestBreaker_DisablesWithoutNoticeToATenantsOpsEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	opsRC := newReceiver(t, nil)
	ops := endpointOf(t, pool, "acme", opsRC.URL, "ops.only")
	rc, _ := newFailingReceiver(t, http.StatusBadGateway)
	failing := createEndpoint(t, pool, rc.URL, "invoice.paid")
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.BreakerMinRequests = 2
		o.Settings.BreakerCooldown = 100 * time.Millisecond
		o.Settings.BreakerMaxCooldown = 200 * time.Millisecond
		o.Settings.DisableAfter = 1500 * time.Millisecond
		o.Settings.OpsEndpointID = ops.ID
		o.Backoff = shortSchedule
	})
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	eventually.Explain(t, "the failing endpoint is disabled", time.Minute, func() bool {
		if _, err := p.Drain(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RunRetries(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		return !endpointBreaker(t, pool, failing.ID).Enabled
	}, func() string { return "" })
	if n := len(opsRC.requests()) + count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE endpoint_id = $1`, ops.ID); n != 0 {
		t.Fatalf("the tenant's ops endpoint got %d notices or rows", n)
	}
}

// A success counts toward the breaker wherever in the pool it is marked:
// one dispatcher counts the endpoint's first failure, and a success that
// another dispatcher marks — on a delivery it loaded before that failure —
// is counted in the same window and ends the failure run.
func TestBreaker_SuccessMarkedElsewhereCounts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p, sibling := newDispatcher(t, pool, nil), newDispatcher(t, pool, nil)
	d := bornDelivery(t, p, "https://hooks.example.com/in")
	loaded := delivery{id: d.ID, endpointID: d.EndpointID, attempt: 1}
	p.record(ctx, loaded, &Result{Attempt: 1, Error: "HTTP 500"}, classed{class: engine.NamedWait, wait: time.Hour}, false, false, nil)
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'pending' WHERE id = $1`, d.ID); err != nil {
		t.Fatal(err)
	}
	sibling.record(ctx, loaded, &Result{Attempt: 1, StatusCode: 204}, classed{class: engine.Delivered}, false, false, nil)
	if b := endpointBreaker(t, pool, d.EndpointID); b.Requests != 2 || b.WindowFailures != 1 || b.Failures != 0 {
		t.Fatalf("breaker %+v, want the window's 1 failure and 1 success counted and the failure run reset", b)
	}
}

// Each of the recovering phase's edges, one mark on an endpoint in a
// prepared state (BreakerProbes 1, BreakerMinRequests 5, rate 80 %): the
// probe's success that closes a half-open breaker starts the slow start
// with the trial's successes; in a window not yet over, successes are
// counted however many (early in the phase they are mostly retries, and
// ending it on them let the held first attempts out together: measured in
// the pool, the breaker reopened); a window that ended with the minimum's
// successes and under half the opening share failed ends it, and the
// doubling of the pause with it; one that ended half failed starts again
// at the closing counts, on a success or a failure; a failure that reaches
// the rate reopens the breaker and ends the phase.
func TestBreaker_RecoveringEdges(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	settings := Settings{BreakerProbes: 1, BreakerMinRequests: 5}.withDefaults()
	type counts struct {
		recovering, paused bool
		requests, failures int
		opens              int
	}
	const ended = `breaker_window_at = now() - interval '2 minutes'`
	for _, tc := range []struct {
		name    string
		state   string // SET clause on the endpoint
		outcome Outcome
		want    counts
		wantWin bool // a window after the mark
	}{
		{"half-open probe succeeds: recovering", `paused_until = now() - interval '1 second', breaker_opens = 2, breaker_window_at = now()`,
			OutcomeSent, counts{recovering: true, requests: 1, opens: 2}, true},
		{"window not over, all succeeded: still recovering", `breaker_recovering = true, breaker_opens = 2, breaker_window_at = now(), breaker_requests = 30`,
			OutcomeSent, counts{recovering: true, requests: 31, opens: 2}, true},
		{"window over, healthy: recovered", `breaker_recovering = true, breaker_opens = 2, ` + ended + `, breaker_requests = 10, breaker_failures = 3`,
			OutcomeSent, counts{}, false},
		{"window over, half failed: the closing counts again", `breaker_recovering = true, ` + ended + `, breaker_requests = 10, breaker_failures = 4`,
			OutcomeSent, counts{recovering: true, requests: 2}, true},
		{"window over, a failure: the closing counts again", `breaker_recovering = true, ` + ended + `, breaker_requests = 10, breaker_failures = 4`,
			OutcomeRetry, counts{recovering: true, requests: 2, failures: 1}, true},
		{"half failed: still recovering", `breaker_recovering = true, breaker_window_at = now(), breaker_requests = 9, breaker_failures = 4`,
			OutcomeSent, counts{recovering: true, requests: 10, failures: 4}, true},
		{"a failure at the rate: open, not recovering", `breaker_recovering = true, breaker_window_at = now(), breaker_requests = 19, breaker_failures = 15`,
			OutcomeRetry, counts{paused: true, opens: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			ep := createEndpoint(t, pool, "https://example.com/hook/"+strings.ReplaceAll(tc.name, " ", "-"))
			if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET `+tc.state+` WHERE id = $1`, ep.ID); err != nil {
				t.Fatal(err)
			}
			id := insertDueDeliveries(t, pool, ep.ID, 1, time.Second)[0]
			m := Result{Outcome: tc.outcome, Attempt: 1, StatusCode: 204}
			if tc.outcome != OutcomeSent {
				m.StatusCode, m.Error, m.RetryIn = 500, "HTTP 500", time.Minute
			}
			if _, _, err := markDelivery(ctx, pool, nil, id, m, &breakerCount{endpointID: ep.ID, counts: true, settings: settings}); err != nil {
				t.Fatal(err)
			}
			var got counts
			var win bool
			if err := pool.QueryRow(ctx, `SELECT breaker_recovering, paused_until IS NOT NULL, breaker_requests, breaker_failures, breaker_opens, breaker_window_at IS NOT NULL
	FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&got.recovering, &got.paused, &got.requests, &got.failures, &got.opens, &win); err != nil {
				t.Fatal(err)
			}
			if got != tc.want || win != tc.wantWin {
				t.Fatalf("after a %s mark: %+v (window %t), want %+v (window %t)", tc.outcome, got, win, tc.want, tc.wantWin)
			}
			if s := listedState(t, pool, ep.ID); tc.want.recovering && s != "recovering" {
				t.Fatalf("listed as %q, want recovering", s)
			}
		})
	}
}

// A recovering breaker's first attempts are the most that could all fail,
// with everything in flight, and leave the window's failed share under the
// rate: one more would reach it.
func TestBreaker_FirstAttemptsStayUnderTheRate(t *testing.T) {
	t.Parallel()
	for _, rate := range []int{1, 50, 80, 99} {
		for s := range 30 {
			for f := range 30 {
				for inFlight := range 5 {
					b := bucket{recovering: true, successes: s, failures: f, inFlight: inFlight}
					n := b.firstAttempts(rate)
					failed := func(k int) bool { return (f+inFlight+k)*100 >= rate*(s+f+inFlight+k) }
					if n < 0 || n > 0 && failed(n) || !failed(n+1) {
						t.Fatalf("rate %d%%, %d successes, %d failures, %d in flight: %d first attempts", rate, s, f, inFlight, n)
					}
				}
			}
		}
	}
}

// A mark that waits on the endpoint row while another replica's mark of
// the same endpoint commits counts on top of that mark's result, whole:
// here a failure opens the window of a new endpoint in a transaction held
// open until the second mark's statement is waiting on the row's lock.
// The second mark read the counts after the lock, but once took the row's
// other columns from its statement's snapshot (no window, never proven,
// no failure run): a success then wrote 2 requests in no window, which
// broke the counts' check and lost the delivered mark — the delivery was
// sent again after its lease — and a failure counted a run of 1.
func TestBreaker_MarkWaitingOnAnotherMarkCountsOnItsResult(t *testing.T) {
	t.Parallel()
	failure := Result{Outcome: OutcomeRetry, Attempt: 1, StatusCode: 503, Error: "HTTP 503", RetryIn: time.Hour}
	for _, tc := range []struct {
		name                   string
		second                 Result
		failures, failedInARow int
		proven                 bool
	}{
		{"then a success", Result{Outcome: OutcomeSent, Attempt: 1, StatusCode: 204}, 1, 0, true},
		{"then a failure", failure, 2, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ep := createEndpoint(t, pool, "https://hooks.example.com/in")
			// Both leased to an attempt now out.
			first, second := backlogDelivery(t, pool, ep.ID, 1, "1 minute", "1 minute"), backlogDelivery(t, pool, ep.ID, 1, "1 minute", "1 minute")
			counted := &breakerCount{endpointID: ep.ID, counts: true, settings: Settings{}.withDefaults()}

			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, _, err := markDelivery(ctx, tx, nil, first, failure, counted); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := markDelivery(ctx, pool, nil, second, tc.second, counted)
				done <- err
			}()
			eventually.Until(t, "the second mark waiting on the endpoint row", orderingWait, func() bool {
				return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH attempt AS%'`) > 0
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the second mark: %v", err)
			}
			var requests, failures, inARow int
			var window, proven bool
			if err := pool.QueryRow(ctx, `SELECT breaker_requests, breaker_failures, consecutive_failures, breaker_window_at IS NOT NULL, proven_at IS NOT NULL
FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&requests, &failures, &inARow, &window, &proven); err != nil {
				t.Fatal(err)
			}
			if requests != 2 || failures != tc.failures || inARow != tc.failedInARow || !window || proven != tc.proven {
				t.Fatalf("endpoint: %d requests, %d failures, %d failed in a row, window %v, proven %v; want 2, %d, %d, a window, proven %v",
					requests, failures, inARow, window, proven, tc.failures, tc.failedInARow, tc.proven)
			}
		})
	}
}
