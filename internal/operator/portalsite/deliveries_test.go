package portalsite

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/webhook"
)

// The tenant sees its deliveries and every attempt (status, duration,
// what the receiver answered), filters and pages them, sends an event
// again, recovers an endpoint's failures and sends a test event — each
// audited.
func TestDeliveries_SeeReplayRecoverAndTest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.signIn(t, "acme")
	ctx := context.Background()

	code, list := acme.get(Prefix + "/deliveries")
	if code != http.StatusOK || !strings.Contains(list, f.AcmeDelivery) || !strings.Contains(list, "succeeded") {
		t.Fatalf("deliveries: %d:\n%s", code, list)
	}
	if _, filtered := acme.get(Prefix + "/deliveries?status=failed"); strings.Contains(filtered, f.AcmeDelivery) {
		t.Errorf("the failed filter lists a succeeded delivery")
	}
	if code, body := acme.get(Prefix + "/deliveries?since=forever"); code != http.StatusBadRequest || !strings.Contains(body, "since") {
		t.Errorf("a period not offered: %d:\n%s", code, body)
	}
	code, page := acme.get(Prefix + "/deliveries/" + f.AcmeDelivery)
	if code != http.StatusOK || !strings.Contains(page, "ok from acme-receiver") || !strings.Contains(page, "<td>200</td>") {
		t.Fatalf("a delivery's attempts: %d:\n%s", code, page)
	}

	// Send the event again: a new event and delivery, sent at once.
	code, body := acme.submit(Prefix+"/deliveries/"+f.AcmeDelivery, "replay", nil)
	if code != http.StatusOK || !strings.Contains(body, "1 delivery, 1 delivered") {
		t.Fatalf("replay: %d:\n%s", code, body)
	}
	if n := count(t, f.Pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, f.Acme.ID); n != 2 {
		t.Errorf("after a replay acme's endpoint has %d deliveries, want 2", n)
	}

	// Recover: the deliveries that failed in the period go again.
	if _, err := f.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'failed', last_error = 'HTTP 500' WHERE endpoint_id = $1`, f.Acme.ID); err != nil {
		t.Fatal(err)
	}
	code, body = acme.submit(Prefix+"/endpoints/"+f.Acme.ID, "recover", url.Values{"since": {"24h"}})
	if code != http.StatusOK || !strings.Contains(body, "Recovered 1 failed event since") {
		t.Fatalf("recover: %d:\n%s", code, body)
	}

	// A test event, addressed to the endpoint alone.
	code, body = acme.submit(Prefix+"/endpoints/"+f.Acme.ID, "send-test", url.Values{"type": {"postbox.test"}})
	if code != http.StatusOK || !strings.Contains(body, "A test postbox.test event is on its way") {
		t.Fatalf("send-test: %d:\n%s", code, body)
	}
	if _, err := f.Dispatcher.Drain(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ds, err := mustScope(t, "acme").ListDeliveries(ctx, f.Pool, webhook.DeliveryQuery{EventType: "postbox.test"})
	if err != nil || len(ds) != 1 || ds[0].EndpointID != f.Acme.ID || ds[0].Status != webhook.StatusSucceeded {
		t.Fatalf("the test event's deliveries: %+v, %v; want one, delivered to acme's endpoint", ds, err)
	}
	if code, body := acme.submit(Prefix+"/endpoints/"+f.Acme.ID, "send-test", url.Values{"type": {"no.such.type"}}); code != http.StatusBadRequest || !strings.Contains(body, "no example") {
		t.Errorf("a test of a type without an example: %d:\n%s", code, body)
	}

	var actions []string
	rows, err := f.Pool.Query(ctx, `SELECT action || ' ' || target FROM portal_audit WHERE tenant_id = 'acme' AND action <> 'session.open' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		_ = rows.Scan(&a)
		actions = append(actions, a)
	}
	want := []string{"event.replay " + f.AcmeEvent, "endpoint.recover " + f.Acme.ID, "endpoint.test " + f.Acme.ID}
	if strings.Join(actions, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit:\n%s\nwant:\n%s", strings.Join(actions, "\n"), strings.Join(want, "\n"))
	}
}

// The delivery list pages by cursor: the "older" link of a full page
// leads to the rest, and nothing is listed twice.
func TestDeliveries_Pages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.Pool.Exec(ctx, `WITH ev AS (
		INSERT INTO webhook_events (event_type, payload, tenant_id, created_at)
		SELECT 'invoice.paid', '{}', 'acme', now() - make_interval(secs => g) FROM generate_series(1, $2) g RETURNING id, created_at)
	INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, created_at)
	SELECT id, $1, 'failed', 1, created_at FROM ev`, f.Acme.ID, deliveriesPerPage+5); err != nil {
		t.Fatal(err)
	}
	acme := f.signIn(t, "acme")
	_, first := acme.get(Prefix + "/deliveries?status=failed")
	next := regexpFind(first, `id="next" href="([^"]+)"`)
	if next == "" {
		t.Fatalf("a full page has no link to the next")
	}
	_, second := acme.get(unescape(next))
	if n := strings.Count(first, `class="delivery"`) + strings.Count(second, `class="delivery"`); n != deliveriesPerPage+5 {
		t.Errorf("two pages list %d deliveries, want %d", n, deliveriesPerPage+5)
	}
	if strings.Contains(second, `id="next"`) {
		t.Errorf("the last page links to another")
	}
}

// The catalog page shows each type's description, schema and example, as
// text.
func TestEventTypes_CatalogAsText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := webhook.SyncEventTypes(context.Background(), f.Pool, []webhook.EventType{{Name: "invoice.paid",
		Description: "An invoice was paid. <script>alert(1)</script>", Example: []byte(`{"invoice_id":"in_1"}`),
		Schema: []byte(`{"type":"object","required":["invoice_id"]}`)}}); err != nil {
		t.Fatal(err)
	}
	acme := f.signIn(t, "acme")
	code, page := acme.get(Prefix + "/event-types")
	if code != http.StatusOK || !strings.Contains(page, "An invoice was paid.") || !strings.Contains(page, `&#34;invoice_id&#34;: &#34;in_1&#34;`) ||
		!strings.Contains(page, "required") || strings.Contains(page, "<script") {
		t.Fatalf("event types: %d:\n%s", code, page)
	}
	// Its example is what a test event of the type sends.
	_, ep := acme.get(Prefix + "/endpoints/" + f.Acme.ID)
	if !strings.Contains(ep, "<option>invoice.paid</option>") {
		t.Errorf("the test form does not offer the catalog's type with an example:\n%s", ep)
	}
}
