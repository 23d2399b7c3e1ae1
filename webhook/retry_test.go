package webhook

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
)

// Regression for the legacy branch (see docs/design/outbox-transport.md,
// Deliveries written before leases): a pending delivery written before
// deliveries were born leased, with next_retry_at NULL, is claimed by the
// retry claim — leased and counted like any other — and delivered.
func TestRetry_ClaimsLegacyNullNextRetryAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	ep := createEndpoint(t, pool, rc.URL)

	var deliveryID string
	if err := pool.QueryRow(ctx, `WITH ev AS (
	INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{"legacy": true}') RETURNING id)
INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at)
SELECT ev.id, $1, 0, NULL FROM ev RETURNING id`, ep.ID).Scan(&deliveryID); err != nil {
		t.Fatal(err)
	}

	// The claim reads a range of due times; the sweep moves the row with
	// none into it.
	if n, _, err := (retrySource{p}).Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("the sweep moved %d (%v), want the legacy row", n, err)
	}
	before := dbNow(t, pool)
	claimed, _, err := p.claimRetries(ctx, leases.RetryClaimBatch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].id != deliveryID {
		t.Fatalf("retry claim took %d deliveries, want the legacy NULL row", len(claimed))
	}
	got := oneDelivery(t, pool, `id = $1`, deliveryID)
	if got.Attempts != 1 || got.NextRetryAt == nil ||
		!within(*got.NextRetryAt, before.Add(leases.Default().RetryClaimLease(leases.RetryClaimBatch)), 5*time.Second) {
		t.Fatalf("claimed legacy row: attempts %d next_retry_at %v, want 1 and now + RetryClaimLease", got.Attempts, got.NextRetryAt)
	}

	// And the whole pass delivers it.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = NULL WHERE id = $1`, deliveryID); err != nil {
		t.Fatal(err)
	}
	sum, err := p.DrainRetries(ctx, testWindow)
	if err != nil || sum.Sent != 1 {
		t.Fatalf("Retry = %+v, %v; want the legacy delivery sent", sum, err)
	}
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}
}

// Each attempt is re-signed with a fresh timestamp while webhook-id stays
// the event id, so receivers can dedupe; the reference library verifies
// both.
func TestRetry_FreshTimestampStableID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// 1.2 s ±10% keeps the two attempts in different Unix seconds.
	p := newDispatcher(t, pool, func(o *Config) { o.Backoff = []time.Duration{1200 * time.Millisecond} })
	var secret string
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ep := createEndpoint(t, pool, rc.URL)
	secret = ep.Secret
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Retried != 1 {
		t.Fatalf("first attempt: %+v, %v; want a retry scheduled", sum, err)
	}
	eventually.Until(t, "the retry sent", time.Minute, func() bool {
		sum, err := p.DrainRetries(ctx, testWindow)
		if err != nil {
			t.Fatal(err)
		}
		return sum.Sent == 1
	})

	reqs := rc.requests()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(reqs))
	}
	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if got := r.Header.Get(HeaderID); got != d.EventID {
			t.Errorf("attempt %d webhook-id = %q, want the event id %q", i+1, got, d.EventID)
		}
		if err := wh.Verify(r.Body, r.Header); err != nil {
			t.Errorf("attempt %d: reference library rejects the signature: %v", i+1, err)
		}
	}
	if reqs[0].Header.Get(HeaderTimestamp) == reqs[1].Header.Get(HeaderTimestamp) {
		t.Errorf("both attempts carry webhook-timestamp %s; a retry must re-sign with a fresh one", reqs[0].Header.Get(HeaderTimestamp))
	}
	if reqs[0].Header.Get(HeaderSignature) == reqs[1].Header.Get(HeaderSignature) {
		t.Error("both attempts carry the same signature")
	}
	if string(reqs[0].Body) != string(reqs[1].Body) {
		t.Errorf("body changed between attempts:\n%s\n%s", reqs[0].Body, reqs[1].Body)
	}
	if d.Status != "succeeded" || d.Attempts != 2 {
		t.Errorf("delivery %s after %d attempts, want succeeded after 2", d.Status, d.Attempts)
	}
}

// Transient failures end in failed after the bounded number of attempts:
// len(Schedule)+1.
func TestRetry_TransientFailuresEndInFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(o *Config) { o.Backoff = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond} })
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusBadGateway) })
	ep := createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	eventually.Until(t, "the delivery final, on a 10 ms schedule", time.Minute, func() bool {
		if oneDelivery(t, pool, `endpoint_id = $1`, ep.ID).Status != "pending" {
			return true
		}
		if _, err := p.DrainRetries(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		return false
	})
	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	if d.Status != "failed" || d.Attempts != 3 {
		t.Fatalf("delivery %s after %d attempts, want failed after 3", d.Status, d.Attempts)
	}
	if !strings.Contains(str(d.LastError), "HTTP 502") || !strings.Contains(str(d.LastError), "gave up after 3 attempts") {
		t.Errorf("last_error = %q, want the status and the bound", str(d.LastError))
	}
	if n := len(rc.requests()); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_delivery_attempts WHERE delivery_id = $1 AND status_code = 502`, d.ID); n != 3 {
		t.Errorf("%d attempt rows, want 3", n)
	}
	// Failed is terminal: later passes leave it alone.
	if sum, err := p.DrainRetries(ctx, testWindow); err != nil || sum.Claimed != 0 {
		t.Errorf("Retry after failure = %+v, %v; want nothing claimed", sum, err)
	}
}

// A delivery whose endpoint was disabled after it was created is held:
// the claim skips it, no request is made, no attempt is spent, and it is
// delivered once the endpoint is enabled again. One disabled between the
// claim and the attempt is held the same way.
func TestRetry_DisabledEndpointHeldUntilEnabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	d := bornDelivery(t, p, rc.URL)
	if err := DisableEndpoint(ctx, pool, d.EndpointID, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now() WHERE id = $1`, d.ID); err != nil {
		t.Fatal(err)
	}
	if sum, err := p.DrainRetries(ctx, testWindow); err != nil || sum.Started != 0 {
		t.Fatalf("Retry = %+v, %v; want nothing attempted", sum, err)
	}
	if got := oneDelivery(t, pool, `id = $1`, d.ID); got.Status != "pending" || got.Attempts != d.Attempts {
		t.Fatalf("delivery %s with %d attempts, want pending with %d", got.Status, got.Attempts, d.Attempts)
	}

	// Disabled after the claim loaded it: no request, held pending.
	if err := EnableEndpoint(ctx, pool, d.EndpointID); err != nil {
		t.Fatal(err)
	}
	ds, _, err := p.claimRetries(ctx, 10, nil)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim after enable = %d rows, %v; want 1", len(ds), err)
	}
	ds[0].enabled = false
	if sum, _ := p.attempt(ctx, ds[0], trace.SpanContext{}, false); sum.Retried != 1 {
		t.Fatalf("attempt on a disabled endpoint = %+v, want held pending", sum)
	}
	if got := oneDelivery(t, pool, `id = $1`, d.ID); got.Status != "pending" || str(got.LastError) != heldDisabled {
		t.Fatalf("delivery %s (%s), want pending: %s", got.Status, str(got.LastError), heldDisabled)
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("receiver got %d requests while disabled, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_delivery_attempts`); n != 0 {
		t.Fatalf("%d attempt rows for a request never made", n)
	}

	// Enabled again: the held delivery goes out.
	if sum, err := p.DrainRetries(ctx, testWindow); err != nil || sum.Sent != 1 {
		t.Fatalf("Retry after enable = %+v, %v; want the held delivery sent", sum, err)
	}
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}
}

// A retry pass claims only what it has attempt slots for: when its window
// closes with deliveries still due, they stay unclaimed, so no delivery's
// attempts count runs ahead of the requests actually made.
func TestRetry_ClaimsNoMoreThanItCanSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.Concurrency = 1
	})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(time.Second) // simulates: a receiver taking a second, too slow for all six (one at a time) in the pass's window
		w.WriteHeader(http.StatusOK)
	})
	ep := provenEndpoint(t, pool, rc.URL)
	for i := range 6 {
		id := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": i})
		if _, err := p.DispatchFromOutbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}

	// Six sends one at a time take six seconds at least, so the window
	// cannot hold them all however fast the machine; it is long enough
	// that even a busy one claims inside it (its sweep runs first).
	sum, err := p.DrainRetries(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Released != 0 || sum.Claimed != sum.Sent || sum.Claimed == 0 || sum.Claimed == 6 {
		t.Fatalf("Retry = %+v, want some but not all sent, and every claimed delivery sent", sum)
	}
	sent := map[string]int{}
	for _, r := range rc.requests() {
		sent[r.Header.Get(HeaderID)]++
	}
	for _, d := range deliveries(t, pool, `endpoint_id = $1`, ep.ID) {
		if want := 1 + sent[d.EventID]; d.Attempts != want {
			t.Errorf("delivery %s: attempts %d after %d requests, want %d (birth + one claim per request)",
				d.ID, d.Attempts, sent[d.EventID], want)
		}
	}
}

// A disabled endpoint's deliveries are never claimed, so they must neither
// hold the retry window's edge back (every claim would read from them) nor
// be moved into the window by every sweep only to fall behind again; once
// the endpoint is enabled the sweep brings them in.
func TestRetry_DisabledEndpointLeavesTheWindowAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	ep := createEndpoint(t, pool, "https://hooks.example.com/off")
	if err := DisableEndpoint(ctx, pool, ep.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `WITH ev AS (INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id)
INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at) SELECT id, $1, now() - interval '1 minute' FROM ev`, ep.ID); err != nil {
		t.Fatal(err)
	}
	claimed, _, err := p.claimAdmitted(ctx, 10, time.Hour, nil)
	if err != nil || len(claimed) != 0 {
		t.Fatalf("claimed %d (%v) of a disabled endpoint's deliveries", len(claimed), err)
	}
	var due time.Time
	if err := pool.QueryRow(ctx, `SELECT next_retry_at FROM webhook_deliveries`).Scan(&due); err != nil {
		t.Fatal(err)
	}
	if edge := p.retryWindow.Low(); !edge.After(due) {
		t.Fatalf("the window's edge %s stays at the disabled endpoint's delivery (due %s)", edge, due)
	}
	src := retrySource{p}
	if n, _, err := src.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("swept %d (%v) deliveries of a disabled endpoint", n, err)
	}
	if err := EnableEndpoint(ctx, pool, ep.ID); err != nil {
		t.Fatal(err)
	}
	if n, _, err := src.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("after the enable the sweep moved %d (%v), want its delivery", n, err)
	}
	if claimed, _, err := p.claimAdmitted(ctx, 10, time.Hour, nil); err != nil || len(claimed) != 1 {
		t.Fatalf("after the sweep claimed %d (%v), want the delivery", len(claimed), err)
	}
}
