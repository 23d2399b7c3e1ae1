package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// opsEventTypes are the operational events' types, as SQL reads them.
var opsEventTypes = []string{EventEndpointDisabled, EventEndpointRecovered, EventDeliveryExhausted}

// opsEvents is what rc, an operator endpoint, was sent of eventType: each
// event's data, decoded into T with no field T does not know.
func opsEvents[T any](t *testing.T, rc *receiver, eventType string) []T {
	t.Helper()
	var out []T
	for _, r := range rc.requests() {
		var ev struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(r.Body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != eventType {
			continue
		}
		var v T
		dec := json.NewDecoder(bytes.NewReader(ev.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s payload %s: %v", eventType, ev.Data, err)
		}
		out = append(out, v)
	}
	return out
}

// runUntil runs p's fan-out and retry lane until cond holds.
func runUntil(t *testing.T, p *Dispatcher, what string, cond func() bool) {
	t.Helper()
	ctx := testCtx(t)
	eventually.Until(t, what, time.Minute, func() bool {
		if _, err := p.Drain(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		if _, err := p.DrainRetries(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		return cond()
	})
}

// opsReceiver is an operator endpoint: an endpoint without a tenant, on a
// receiver of its own, subscribed to no type the tests send.
func opsReceiver(t *testing.T, db DB) (*receiver, Endpoint) {
	t.Helper()
	rc := newReceiver(t, nil)
	return rc, createEndpoint(t, db, rc.URL, "ops.only")
}

// endpointOf is createEndpoint for an endpoint of tenant.
func endpointOf(t *testing.T, db DB, tenant, url string, eventTypes ...string) Endpoint {
	t.Helper()
	ep, err := CreateEndpoint(context.Background(), db, Settings{}, EndpointParams{Tenant: tenant, URL: url, EventTypes: eventTypes})
	if err != nil {
		t.Fatalf("CreateEndpoint(tenant %q, %s): %v", tenant, url, err)
	}
	return ep
}

// failingEndpoint is an endpoint without a tenant on a receiver that
// answers code to everything.
func failingEndpoint(t *testing.T, db DB, code int, eventTypes ...string) Endpoint {
	t.Helper()
	rc, _ := newFailingReceiver(t, code)
	return createEndpoint(t, db, rc.URL, eventTypes...)
}

// opsRows counts the operational events enqueued, to any endpoint.
func opsRows(t *testing.T, db DB) int {
	t.Helper()
	return count(t, db, `SELECT count(*) FROM webhook_outbox WHERE event_type = ANY ($1)`, opsEventTypes)
}

// A tenant's delivery that spends its attempts is told to the operator
// endpoint — the application's, without a tenant — with the tenant, the
// endpoint (its url redacted), the delivery and why it failed, and to no
// one else. Requeued and failed again, it is told again.
func TestOpsEvents_DeliveryExhaustedTellsTheOperator(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	opsRC, ops := opsReceiver(t, pool)
	bystanderRC := newReceiver(t, nil)
	createEndpoint(t, pool, bystanderRC.URL, EventDeliveryExhausted)
	rc, _ := newFailingReceiver(t, http.StatusInternalServerError)
	ep := endpointOf(t, pool, "acme", rc.URL+"/in?token=s3cret", "invoice.paid")
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.OpsEndpointID = ops.ID
		o.Backoff = []time.Duration{10 * time.Millisecond}
	})
	if _, err := enqueueEvent(t, pool, Event{Tenant: "acme", Type: "invoice.paid", Payload: []byte(`{"n": 1}`)}); err != nil {
		t.Fatal(err)
	}
	runUntil(t, p, "delivery.exhausted at the operator endpoint", func() bool {
		return len(opsEvents[DeliveryExhausted](t, opsRC, EventDeliveryExhausted)) == 1
	})
	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	got := opsEvents[DeliveryExhausted](t, opsRC, EventDeliveryExhausted)[0]
	want := DeliveryExhausted{OpsSubject: OpsSubject{Tenant: "acme", EndpointID: ep.ID, URL: rc.URL + "/in?REDACTED", DeliveryID: d.ID, EventID: d.EventID},
		EventType: "invoice.paid", Attempts: 2, StatusCode: http.StatusInternalServerError, LastError: str(d.LastError), FailedAt: got.FailedAt}
	if d.Status != "failed" || got != want {
		t.Fatalf("delivery %+v told as\n%+v, want\n%+v", d, got, want)
	}
	if !within(got.FailedAt, dbNow(t, pool), time.Minute) || !strings.Contains(got.LastError, "gave up after 2 attempts") {
		t.Fatalf("failed_at %s, last_error %q: want the mark's time and the stored error", got.FailedAt, got.LastError)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE event_type = $1 AND endpoint_id = $2 AND tenant_id IS NULL`,
		EventDeliveryExhausted, ops.ID); n != 1 {
		t.Fatalf("%d delivery.exhausted rows addressed to the operator endpoint without a tenant, want 1", n)
	}
	if n := len(bystanderRC.requests()); n != 0 {
		t.Fatalf("an endpoint subscribed to %s got %d requests: the notice is the operator endpoint's alone", EventDeliveryExhausted, n)
	}

	if err := RequeueDelivery(ctx, pool, d.ID, "test"); err != nil {
		t.Fatal(err)
	}
	runUntil(t, p, "the requeued delivery's failure told too", func() bool {
		return len(opsEvents[DeliveryExhausted](t, opsRC, EventDeliveryExhausted)) == 2
	})
	if again := opsEvents[DeliveryExhausted](t, opsRC, EventDeliveryExhausted)[1]; again.DeliveryID != d.ID || again.Attempts != 2 {
		t.Fatalf("after the requeue: %+v, want delivery %s failed again after 2 attempts", again, d.ID)
	}
	if n := opsRows(t, pool); n != 2 {
		t.Fatalf("%d operational events enqueued, want the 2 failures", n)
	}
}

// The other ways to fail for good are told too, each once: a 410 Gone
// (which disables the endpoint: endpoint.disabled, and OnDisable, with
// the tenant and the delivery), a refused address, and a url the rules
// refuse before any request (its query redacted).
func TestOpsEvents_PermanentFailuresTellTheOperator(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	opsRC, ops := opsReceiver(t, pool)
	goneRC, _ := newFailingReceiver(t, http.StatusGone)
	gone := endpointOf(t, pool, "globex", goneRC.URL+"/gone", "invoice.paid")
	refused := createEndpoint(t, pool, "http://10.255.255.1/in", "invoice.paid")
	unusable := createEndpoint(t, pool, "https://hooks.example.com/in", "invoice.paid")
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET url = 'http://127.0.0.1:port/in?token=s3cret' WHERE id = $1`, unusable.ID); err != nil {
		t.Fatal(err)
	}
	var onDisable []EndpointDisabled
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.OpsEndpointID = ops.ID
		o.Backoff = shortSchedule
		o.OnDisable = func(ctx context.Context, tx pgx.Tx, d EndpointDisabled) error {
			onDisable = append(onDisable, d)
			return nil
		}
	})
	if _, err := enqueueEvent(t, pool, Event{Tenant: "globex", Type: "invoice.paid", Payload: []byte(`{"n": 1}`)}); err != nil {
		t.Fatal(err)
	}
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	runUntil(t, p, "three delivery.exhausted and one endpoint.disabled", func() bool {
		return len(opsEvents[DeliveryExhausted](t, opsRC, EventDeliveryExhausted)) == 3 &&
			len(opsEvents[EndpointDisabled](t, opsRC, EventEndpointDisabled)) == 1
	})
	byEndpoint := map[string]DeliveryExhausted{}
	for _, n := range opsEvents[DeliveryExhausted](t, opsRC, EventDeliveryExhausted) {
		byEndpoint[n.EndpointID] = n
	}
	for _, c := range []struct {
		ep          Endpoint
		tenant, url string
		status      int
		err         string
	}{
		{gone, "globex", goneRC.URL + "/gone", http.StatusGone, "410 Gone"},
		{refused, "", "http://10.255.255.1/in", 0, "refusing to connect"},
		{unusable, "", "http://127.0.0.1:port/in?REDACTED", 0, "does not parse"},
	} {
		d := oneDelivery(t, pool, `endpoint_id = $1`, c.ep.ID)
		n := byEndpoint[c.ep.ID]
		if d.Status != "failed" || n.DeliveryID != d.ID || n.EventID != d.EventID || n.Tenant != c.tenant || n.URL != c.url ||
			n.Attempts != 1 || n.StatusCode != c.status || n.LastError != str(d.LastError) || !strings.Contains(n.LastError, c.err) {
			t.Fatalf("delivery %+v (last error %q) told as %+v, want tenant %q, url %s, status %d, error %q", d, str(d.LastError), n, c.tenant, c.url, c.status, c.err)
		}
	}
	for _, r := range opsRC.requests() {
		if bytes.Contains(r.Body, []byte("s3cret")) {
			t.Fatalf("a secret reached the operator endpoint: %s", r.Body)
		}
	}

	d := oneDelivery(t, pool, `endpoint_id = $1`, gone.ID)
	b := endpointBreaker(t, pool, gone.ID)
	disabled := opsEvents[EndpointDisabled](t, opsRC, EventEndpointDisabled)[0]
	want := EndpointDisabled{OpsSubject: OpsSubject{Tenant: "globex", EndpointID: gone.ID, URL: goneRC.URL + "/gone", DeliveryID: d.ID, EventID: d.EventID},
		Reason: b.Reason, Cause: DisabledGone, DisabledAt: disabled.DisabledAt}
	if b.Enabled || disabled != want || !within(disabled.DisabledAt, dbNow(t, pool), time.Minute) {
		t.Fatalf("endpoint.disabled %+v, want %+v (endpoint %+v)", disabled, want, b)
	}
	if len(onDisable) != 1 {
		t.Fatalf("OnDisable saw %+v, want the one disable", onDisable)
	}
	seen := onDisable[0]
	if at := seen.DisabledAt; at.Equal(disabled.DisabledAt) {
		seen.DisabledAt = disabled.DisabledAt // the same instant, in the database's zone
	}
	if seen != disabled {
		t.Fatalf("OnDisable saw %+v, want the notice %+v", seen, disabled)
	}
	if n := opsRows(t, pool); n != 4 {
		t.Fatalf("%d operational events enqueued, want 4: each failure and the disable once", n)
	}
}

// An endpoint whose breaker opened and whose probes then succeed is told
// recovered once per recovery — with the tenant, the endpoint, the
// delivery whose success closed it and when it had paused — and a second
// pause and recovery is told again.
func TestOpsEvents_EndpointRecoveredOncePerRecovery(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	opsRC, ops := opsReceiver(t, pool)
	rc, healthy := newFailingReceiver(t, http.StatusBadGateway)
	ep := endpointOf(t, pool, "acme", rc.URL+"/in", "invoice.paid")
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.OpsEndpointID = ops.ID
		o.Settings.BreakerMinRequests = 2
		o.Settings.BreakerProbes = 1
		o.Settings.BreakerCooldown = 100 * time.Millisecond
		o.Settings.BreakerMaxCooldown = 200 * time.Millisecond
		o.Backoff = shortSchedule
	})
	recovered := func() []EndpointRecovered { return opsEvents[EndpointRecovered](t, opsRC, EventEndpointRecovered) }
	n := 0
	pauseAndRecover := func(recoveries int) {
		t.Helper()
		healthy.Store(false)
		runUntil(t, p, "the breaker open", func() bool {
			if endpointBreaker(t, pool, ep.ID).PausedUntil != nil {
				return true
			}
			n++
			if _, err := enqueueEvent(t, pool, Event{Tenant: "acme", Type: "invoice.paid", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			return false
		})
		if got := len(recovered()); got != recoveries-1 {
			t.Fatalf("%d endpoint.recovered while paused, want %d", got, recoveries-1)
		}
		healthy.Store(true)
		runUntil(t, p, "every delivery sent, the notices too", func() bool {
			return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'succeeded'`, ep.ID) == n &&
				count(t, pool, `SELECT (SELECT count(*) FROM webhook_outbox WHERE status = 'pending') + (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')`) == 0
		})
		if got := len(recovered()); got != recoveries {
			t.Fatalf("%d endpoint.recovered after recovery %d, want %d", got, recoveries, recoveries)
		}
	}
	pauseAndRecover(1)
	first := recovered()[0]
	var closedBy deliveryState
	for _, d := range deliveries(t, pool, `endpoint_id = $1`, ep.ID) {
		if d.ID == first.DeliveryID {
			closedBy = d
		}
	}
	want := EndpointRecovered{OpsSubject: OpsSubject{Tenant: "acme", EndpointID: ep.ID, URL: rc.URL + "/in", DeliveryID: closedBy.ID, EventID: closedBy.EventID},
		PausedAt: first.PausedAt, RecoveredAt: first.RecoveredAt}
	if closedBy.Status != "succeeded" || first != want || first.PausedAt.IsZero() || !first.PausedAt.Before(first.RecoveredAt) {
		t.Fatalf("endpoint.recovered %+v, want %+v, paused before it recovered", first, want)
	}
	pauseAndRecover(2)
	if second := recovered()[1]; !second.PausedAt.After(first.RecoveredAt) {
		t.Fatalf("second recovery %+v: want the second pause's, after %s", second, first.RecoveredAt)
	}
}

// The operator endpoint's own failures tell no one: a notice it fails to
// take for good, and its disable after a 410, would otherwise be told to
// itself, without end.
func TestOpsEvents_OperatorEndpointFailuresAreNotToldToItself(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ops := failingEndpoint(t, pool, http.StatusGone, "ops.only")
	ep := failingEndpoint(t, pool, http.StatusInternalServerError, "invoice.paid")
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.OpsEndpointID = ops.ID
		o.Backoff = []time.Duration{10 * time.Millisecond}
	})
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	runUntil(t, p, "the operator endpoint gone", func() bool { return !endpointBreaker(t, pool, ops.ID).Enabled })
	if d := oneDelivery(t, pool, `endpoint_id = $1`, ops.ID); d.Status != "failed" {
		t.Fatalf("the notice's delivery to the operator endpoint: %+v, want failed", d)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE event_type = $1 AND payload->>'endpoint_id' = $2`, EventDeliveryExhausted, ep.ID); n != 1 {
		t.Fatalf("%d delivery.exhausted about the failing endpoint, want 1", n)
	}
	if n := opsRows(t, pool); n != 1 {
		t.Fatalf("%d operational events, want only the one about the failing endpoint: none about the operator endpoint", n)
	}
}

// Without an operator endpoint nothing is enqueued, whatever fails; and
// no mark carries the notice's statement (markExhaustedSQL) but a failure
// for good of another endpoint's delivery with one set.
func TestOpsEvents_NoneWithoutAnOperatorEndpoint(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	gone := failingEndpoint(t, pool, http.StatusGone, "invoice.paid")
	failing := failingEndpoint(t, pool, http.StatusInternalServerError, "invoice.paid")
	p := newDispatcher(t, pool, func(o *Config) { o.Backoff = []time.Duration{10 * time.Millisecond} })
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	runUntil(t, p, "both deliveries failed", func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'`) == 2
	})
	if endpointBreaker(t, pool, gone.ID).Enabled || !endpointBreaker(t, pool, failing.ID).Enabled {
		t.Fatal("want the 410 endpoint disabled, the failing one not")
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox`); n != 1 {
		t.Fatalf("%d outbox rows, want the one enqueued: no operational event without an operator endpoint", n)
	}

	const ops, other = "0193f5a1-0000-7000-8000-00000000000a", "0193f5a1-0000-7000-8000-00000000000b"
	for _, c := range []struct {
		ops, endpoint string
		outcome       Outcome
		notices       bool
	}{
		{"", other, OutcomeFailed, false},
		{"", other, OutcomeSent, false},
		{ops, other, OutcomeSent, false},
		{ops, other, OutcomeRetry, false},
		{ops, ops, OutcomeFailed, false},
		{ops, other, OutcomeFailed, true},
	} {
		m, notices, err := deliveryMark(other, Result{Outcome: c.outcome, Attempt: 1},
			&breakerCount{endpointID: c.endpoint, settings: Settings{OpsEndpointID: c.ops}.withDefaults()})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{false: markSQL, true: markExhaustedSQL}[c.notices]; notices != c.notices || m.SQL != want {
			t.Fatalf("%+v: notices %v, want %v and its statement", c, notices, c.notices)
		}
	}
}

// An operator endpoint of a tenant is sent none of the events — each names
// another's endpoint — and says so in the log; the failures and the
// disable they are about go ahead.
func TestOpsEvents_NoneToAnOperatorEndpointOfATenant(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	opsRC := newReceiver(t, nil)
	ops := endpointOf(t, pool, "acme", opsRC.URL, "ops.only")
	gone := failingEndpoint(t, pool, http.StatusGone, "invoice.paid")
	var logs logbuf.Buffer
	p := newDispatcher(t, pool, func(o *Config) {
		o.Settings.OpsEndpointID = ops.ID
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	runUntil(t, p, "the 410 endpoint disabled, its delivery failed", func() bool {
		return !endpointBreaker(t, pool, gone.ID).Enabled && oneDelivery(t, pool, `endpoint_id = $1`, gone.ID).Status == "failed"
	})
	if n := len(opsRC.requests()) + count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE endpoint_id = $1`, ops.ID); n != 0 {
		t.Fatalf("the tenant's operator endpoint got %d events or rows", n)
	}
	for _, eventType := range []string{EventEndpointDisabled, EventDeliveryExhausted} {
		if !strings.Contains(logs.String(), `msg="operational event not sent: `+EnvOpsEndpointID+` names an endpoint of a tenant; the operator's endpoint has none" component=webhook event_type=`+eventType) {
			t.Fatalf("no error logged for the %s not sent:\n%s", eventType, logs.String())
		}
	}
}

// delivery.exhausted is told once per failure: a second mark of the same
// failure — a late writer whose lease expired, finding the delivery
// already failed — is stale and tells nothing.
func TestOpsEvents_StaleFailureMarkTellsNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ops := createEndpoint(t, pool, "https://ops.example.com/in", "ops.only")
	p := newDispatcher(t, pool, func(o *Config) { o.Settings.OpsEndpointID = ops.ID })
	d := bornDelivery(t, p, "https://hooks.example.com/in")
	loaded := delivery{id: d.ID, eventID: d.EventID, endpointID: d.EndpointID, url: "https://hooks.example.com/in", attempt: 1}
	for range 2 {
		p.record(ctx, loaded, &Result{Attempt: 1, Error: "endpoint url unusable"}, classed{class: engine.Permanent}, false, false, nil)
	}
	if got := oneDelivery(t, pool, `id = $1`, d.ID); got.Status != "failed" || opsRows(t, pool) != 1 {
		t.Fatalf("delivery %+v, %d operational events: want failed and told once", got, opsRows(t, pool))
	}
}
