package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/testsupport/pgtest"
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
	Failures    int
	Opens       int
	PausedUntil *time.Time
	Probing     bool
	Enabled     bool
	Reason      string
}

func endpointBreaker(t *testing.T, db DB, id string) breakerState {
	t.Helper()
	var b breakerState
	if err := db.QueryRow(context.Background(), `SELECT consecutive_failures, breaker_opens, paused_until, probing, enabled, coalesce(disabled_reason, '')
FROM webhook_endpoints WHERE id = $1`, id).Scan(&b.Failures, &b.Opens, &b.PausedUntil, &b.Probing, &b.Enabled, &b.Reason); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitPast sleeps until the database clock is past at.
func waitPast(t *testing.T, db DB, at time.Time) {
	t.Helper()
	if d := at.Sub(dbNow(t, db)); d > 0 {
		time.Sleep(d + 20*time.Millisecond)
	}
}

// A receiver failing 5 times opens the breaker: the endpoint's deliveries
// (new ones too) wait, attempts untouched. After the cool-down one probe
// goes out — a failed probe reopens the breaker for twice as long — and a
// successful probe closes it: the held deliveries follow.
func TestBreaker_OpensAfterFailuresAndOneProbeCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	edit := func(o *Config) {
		o.Settings.BreakerFailures = 5
		o.Settings.BreakerCooldown = time.Second
		o.Schedule = shortSchedule
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
			time.Sleep(300 * time.Millisecond) // the probe is slow: nothing else may go out meanwhile
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, pool, rc.URL)
	for i := range 5 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
	}
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	b := endpointBreaker(t, pool, ep.ID)
	if b.Failures != 5 || b.Opens != 1 || b.PausedUntil == nil {
		t.Fatalf("after 5 failures: %+v, want open (5 failures, 1 opening, paused)", b)
	}
	// Open: a new event is born held, and nothing goes out.
	for i := range 3 {
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 10 + i})
	}
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
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
	if _, err := p.Retry(ctx); err != nil {
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

	// The receiver recovers; the next probe succeeds and the rest follow,
	// on either dispatcher, only after the probe's answer.
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
			t.Fatalf("a request %s after the probe, before its answer: want one probe only", d)
		}
	}
	if b := endpointBreaker(t, pool, ep.ID); b.Failures != 0 || b.Opens != 0 || b.PausedUntil != nil || b.Probing {
		t.Fatalf("after a successful probe: %+v, want closed", b)
	}
}

// A receiver failing past the window is disabled with a reason; the
// postbox.endpoint.disabled notice, enqueued with the disable, reaches the
// operator endpoint (and no other); the held deliveries are not lost and go
// out once the endpoint is enabled again.
func TestBreaker_DisablesAfterWindowAndNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	opsRC, bystanderRC := newReceiver(t, nil), newReceiver(t, nil)
	ops := createEndpoint(t, pool, opsRC.URL, "ops.only")
	createEndpoint(t, pool, bystanderRC.URL, EventEndpointDisabled)
	var healthy atomic.Bool
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if healthy.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	})
	failing := createEndpoint(t, pool, rc.URL, "invoice.paid")
	reg := prometheus.NewRegistry()
	var notified []EndpointDisabled
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.BreakerFailures = 2
		o.Settings.BreakerCooldown = 100 * time.Millisecond
		o.Settings.BreakerMaxCooldown = 200 * time.Millisecond
		o.Settings.DisableAfter = 1500 * time.Millisecond
		o.Settings.OpsEndpointID = ops.ID
		o.Schedule = shortSchedule
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
		if _, err := p.Drain(ctx); err != nil {
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
	if notice.Type != EventEndpointDisabled || notice.Data.EndpointID != failing.ID || notice.Data.Reason != b.Reason {
		t.Fatalf("notice %+v, want %s for %s with the reason", notice, EventEndpointDisabled, failing.ID)
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
	if _, err := p.Retry(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'succeeded'`, failing.ID); n != 2 {
		t.Fatalf("%d of 2 held deliveries sent after enabling", n)
	}
}
