package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Ten tenants with two endpoints each and one endpoint of no tenant, a
// mix of events — by the Go API and plain SQL, of two types, some
// addressed to one of their tenant's endpoints, some ordered, some of no
// tenant — fanned out by two dispatchers claiming the same rows at once,
// with first attempts refused and retried, deliveries that fail for good
// recovered for their tenant and requeued, and events replayed through a
// tenant's scope: every request reaches an endpoint of its event's tenant,
// and every event reaches each endpoint it should.
func TestTenant_IsolationUnderConcurrencyRetriesAndReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const tenants, events = 10, 200

	type endpoint struct {
		ep      Endpoint
		rc      *receiver
		invoice bool // subscribed to invoice.paid only
	}
	var (
		eps      []endpoint
		byTenant = map[string][]int{} // tenant → indexes into eps
		healthy  atomic.Bool          // the failing endpoints start answering 204
	)
	add := func(tenant string, invoice bool, fail string) {
		t.Helper()
		var types []string
		if invoice {
			types = []string{"invoice.paid"}
		}
		rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, n int) {
			switch {
			case fail == "first" && n == 1, fail == "until healthy" && !healthy.Load():
				w.WriteHeader(http.StatusInternalServerError)
			default:
				w.WriteHeader(http.StatusNoContent)
			}
		})
		ep, err := CreateEndpoint(ctx, pool, Settings{}, EndpointParams{Tenant: tenant, URL: rc.URL, EventTypes: types})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET proven_at = now() WHERE id = $1`, ep.ID); err != nil {
			t.Fatal(err)
		}
		if fail == "until healthy" {
			// A failed ordered delivery would hold its key, and so the
			// recovery's replays of the key, under the block policy.
			if err := SetOrderOnFailure(ctx, pool, ep.ID, OrderProceed); err != nil {
				t.Fatal(err)
			}
		}
		byTenant[tenant] = append(byTenant[tenant], len(eps))
		eps = append(eps, endpoint{ep: ep, rc: rc, invoice: invoice})
	}
	for i := range tenants {
		tenant := "t" + strconv.Itoa(i)
		fail := ""
		switch i {
		case 3, 5:
			fail = "until healthy" // fails for good, then recovered (3) or requeued (5)
		case 1, 7:
			fail = "first"
		}
		add(tenant, false, fail)
		add(tenant, true, "")
	}
	add("", false, "")

	// The events: tenant i%11 (10 is none), type by parity, every third
	// by EnqueueEvent, every seventh addressed to its tenant's first
	// endpoint, every fifth ordered by one of four keys.
	want := map[string][]int{} // event id → the endpoints it must reach
	for i := range events {
		tenant := ""
		if k := i % 11; k < tenants {
			tenant = "t" + strconv.Itoa(k)
		}
		ev := Event{Tenant: tenant, Type: "customer.updated", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		if i%2 == 0 {
			ev.Type = "invoice.paid"
		}
		if i%5 == 0 {
			ev.OrderingKey = "cus_" + strconv.Itoa(i%4)
		}
		if i%7 == 0 {
			ev.EndpointID = eps[byTenant[tenant][0]].ep.ID
		}
		var id string
		var err error
		if i%3 == 0 {
			id, err = enqueueEvent(t, pool, ev)
		} else {
			err = pool.QueryRow(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload, ordering_key, endpoint_id)
				VALUES (NULLIF($1, ''), $2, $3, NULLIF($4, ''), NULLIF($5, '')::uuid) RETURNING id`,
				ev.Tenant, ev.Type, string(ev.Payload), ev.OrderingKey, ev.EndpointID).Scan(&id)
		}
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		for _, e := range byTenant[tenant] {
			if ev.EndpointID == eps[e].ep.ID || (ev.EndpointID == "" && (!eps[e].invoice || ev.Type == "invoice.paid")) {
				want[id] = append(want[id], e)
			}
		}
	}

	// Retries 10 ms after a failure, one of them; no breaker, which would
	// hold the failing endpoints' deliveries for its cooldown.
	quick := func(c *Config) {
		c.Backoff = []time.Duration{10 * time.Millisecond}
		c.Settings.BreakerMinRequests = maxBreakerMinRequests
	}
	ps := []*Dispatcher{newDispatcher(t, pool, quick), newDispatcher(t, pool, quick)}
	drainAll := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, 2*len(ps))
		for i, p := range ps {
			wg.Go(func() { _, errs[2*i] = p.Drain(ctx, testWindow) })
			wg.Go(func() { _, errs[2*i+1] = p.DrainRetries(ctx, testWindow) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// Until nothing is pending: retries come due 10 ms after a failure.
	settled := func() bool {
		drainAll()
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`)+
			count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE status = 'pending'`) == 0
	}
	eventually.Explain(t, "every delivery settles", 3*time.Minute, settled, pendingNow(t, pool))

	// t3's and t5's first endpoints failed for good; they answer now.
	healthy.Store(true)
	t3, err := ForTenant("t3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := t3.RecoverSince(ctx, ps[0], time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	t5, err := ForTenant("t5")
	if err != nil {
		t.Fatal(err)
	}
	failed5, err := t5.ListDeliveries(ctx, pool, DeliveryQuery{Status: StatusFailed, Limit: maxListedDeliveries})
	if err != nil || len(failed5) == 0 {
		t.Fatalf("t5's failed deliveries: %d, %v; want some to requeue", len(failed5), err)
	}
	for _, d := range failed5 {
		if err := RequeueDelivery(ctx, pool, d.ID, "isolation-test"); err != nil {
			t.Fatal(err)
		}
	}
	// Replays through t1's scope, of t1's first events.
	t1, err := ForTenant("t1")
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for id := range want {
		var tenant *string
		if err := pool.QueryRow(ctx, `SELECT tenant_id FROM webhook_events WHERE id = $1`, id).Scan(&tenant); err != nil {
			t.Fatal(err)
		}
		if tenant == nil || *tenant != "t1" || replayed == 3 {
			continue
		}
		rep, err := t1.ReplayEvent(ctx, ps[1], id)
		if err != nil {
			t.Fatal(err)
		}
		want[rep.EventID] = want[id]
		replayed++
	}
	eventually.Explain(t, "the recovered, requeued and replayed deliveries settle", 3*time.Minute, settled, pendingNow(t, pool))

	// Every request's event is of its endpoint's tenant.
	tenantOf := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT id::text, coalesce(tenant_id, '') FROM webhook_events`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tenant string
		if err := rows.Scan(&id, &tenant); err != nil {
			t.Fatal(err)
		}
		tenantOf[id] = tenant
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	got := map[string]map[int]bool{} // event → endpoints that accepted it
	crossed := 0
	for e, x := range eps {
		for _, r := range x.rc.requests() {
			id := r.Header.Get("webhook-id")
			if tenantOf[id] != x.ep.Tenant {
				crossed++
				t.Errorf("event %s of tenant %q reached endpoint %s of tenant %q", id, tenantOf[id], x.ep.ID, x.ep.Tenant)
			}
			if got[id] == nil {
				got[id] = map[int]bool{}
			}
			got[id][e] = true
		}
	}
	missing := 0
	for id, es := range want {
		for _, e := range es {
			if !got[id][e] {
				missing++
			}
		}
	}
	if crossed != 0 || missing != 0 || replayed != 3 {
		t.Fatalf("%d requests crossed tenants, %d deliveries never arrived, %d replays; want 0, 0, 3", crossed, missing, replayed)
	}
}

// pendingNow describes what is still pending, for a failure message.
func pendingNow(t *testing.T, db DB) func() string {
	return func() string {
		var s string
		if err := db.QueryRow(context.Background(), `SELECT coalesce(string_agg(concat_ws(' ', 'delivery', d.id, 'to', p.tenant_id, 'attempts', d.attempts,
			'due', d.next_retry_at, 'leased', d.leased_until, 'enabled', p.enabled, 'paused', p.paused_until, 'key', d.ordering_key), E'\n'), '')
			FROM webhook_deliveries d JOIN webhook_endpoints p ON p.id = d.endpoint_id WHERE d.status = 'pending'`).Scan(&s); err != nil {
			return err.Error()
		}
		return s
	}
}
