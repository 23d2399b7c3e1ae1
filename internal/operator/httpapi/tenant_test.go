package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/webhook"
)

// bodies are a valid body for each tenant operation that takes one, so a
// refusal is about the id, not the body.
func bodies(since time.Time) map[string]any {
	return map[string]any{
		"PATCH /endpoints/{id}":              map[string]any{"description": "moved"},
		"POST /endpoints/{id}/disable":       map[string]any{"reason": "probe"},
		"POST /endpoints/{id}/rotate-secret": map[string]any{"keep_seconds": 0},
		"POST /endpoints/{id}/recover":       map[string]any{"since": since},
		"POST /endpoints/{id}/test":          map[string]any{"type": webhook.TestEventType},
	}
}

// Every tenant operation, as the tenant (a tenant token) and as an
// application key acting for it, given another tenant's endpoint,
// delivery or event id — in the path, the query or the body — answers
// byte for byte as for an id nothing has, shows nothing of the other
// tenant's and changes nothing of it. The operations come from Routes.
func TestIsolation_AnotherTenantsIDsAreNoIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.tenantToken(t, "acme")
	const none = "00000000-0000-4000-8000-000000000000"
	others := map[string]string{"endpoints": f.Globex.ID, "deliveries": f.GlobexDelivery, "events": f.GlobexEvent}
	body := bodies(time.Now().Add(-time.Hour))
	type probe struct {
		name, method, path, other string
		body                      func(id string) any
	}
	var probes []probe
	tried := 0
	for _, rt := range Routes {
		if rt.Access != Tenant || !strings.Contains(rt.Path, "{id}") {
			continue
		}
		tried++
		kind := strings.Split(strings.TrimPrefix(rt.Path, "/"), "/")[0]
		other, ok := others[kind]
		if !ok {
			t.Fatalf("%s %s: no other tenant's id for %q here", rt.Method, rt.Path, kind)
		}
		b := body[rt.Method+" "+rt.Path]
		probes = append(probes, probe{rt.Method + " " + rt.Path, rt.Method, rt.Path, other, func(string) any { return b }})
	}
	probes = append(probes,
		probe{"GET /deliveries?endpoint=", http.MethodGet, "/deliveries?endpoint={id}", f.Globex.ID, func(string) any { return nil }},
		probe{"GET /deliveries?cursor=", http.MethodGet, "/deliveries?cursor={id}", f.GlobexDelivery, func(string) any { return nil }},
	)
	for _, as := range []struct{ name, prefix, bearer string }{
		{"tenant token", Prefix, acme},
		{"application key as acme", Prefix + "/tenants/acme", f.appKey},
	} {
		for _, pr := range probes {
			at := func(id string) (int, string) {
				return f.call(t, pr.method, as.prefix+strings.Replace(pr.path, "{id}", id, 1), as.bearer, pr.body(id))
			}
			before := f.Snapshot(t)
			codeOther, bodyOther := at(pr.other)
			codeNone, bodyNone := at(none)
			if codeOther != http.StatusNotFound || codeOther != codeNone || bodyOther != bodyNone {
				t.Errorf("%s, %s: another tenant's id answered %d, one that does not exist %d:\n%s\n%s", as.name, pr.name, codeOther, codeNone, bodyOther, bodyNone)
			}
			for _, leak := range append(f.Leaks(t), pr.other) {
				if strings.Contains(bodyOther, leak) {
					t.Errorf("%s, %s: the answer shows %q", as.name, pr.name, leak)
				}
			}
			if after := f.Snapshot(t); after != before {
				t.Errorf("%s, %s changed another tenant's rows", as.name, pr.name)
			}
		}
	}
	if tried < 12 {
		t.Fatalf("only %d tenant operations take an id", tried)
	}
	// An id in an enqueue's body: an event of acme addressed to globex's
	// endpoint is refused as one addressed to no endpoint.
	before := f.Snapshot(t)
	codeOther, bodyOther := f.call(t, http.MethodPost, Prefix+"/events", f.appKey, map[string]any{"tenant": "acme", "type": "t.x", "payload": map[string]any{}, "endpoint_id": f.Globex.ID})
	codeNone, bodyNone := f.call(t, http.MethodPost, Prefix+"/events", f.appKey, map[string]any{"tenant": "acme", "type": "t.x", "payload": map[string]any{}, "endpoint_id": none})
	if codeOther >= 300 && codeOther < 400 || codeOther == http.StatusAccepted || codeOther != codeNone ||
		strings.ReplaceAll(bodyOther, f.Globex.ID, "ID") != strings.ReplaceAll(bodyNone, none, "ID") {
		t.Errorf("an event addressed to another tenant's endpoint: %d %s; to none: %d %s", codeOther, bodyOther, codeNone, bodyNone)
	}
	if f.Snapshot(t) != before {
		t.Errorf("the refused enqueue changed another tenant's rows")
	}
	// Lists hold the tenant's own rows only.
	for _, p := range []string{"/endpoints", "/deliveries"} {
		_, page := f.call(t, http.MethodGet, Prefix+p, acme, nil)
		if !strings.Contains(page, "acme-in") || strings.Contains(page, "globex") {
			t.Errorf("%s is not acme's alone: %s", p, page)
		}
	}
}

// The tenant's operations on its own rows, as its portal would do them,
// each change audited with the token's session.
func TestTenant_OperationsOnItsOwn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.tenantToken(t, "acme")
	ctx := context.Background()
	call := func(method, path string, body any, want int) string {
		t.Helper()
		code, b := f.call(t, method, Prefix+path, acme, body)
		if code != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, b)
		}
		return b
	}
	var ep webhook.Endpoint
	decodeJSON(t, call(http.MethodPost, "/endpoints", map[string]any{"url": f.Receiver.URL + "/acme-api", "description": "from the API"}, http.StatusCreated), &ep)
	if ep.Tenant != "acme" || !strings.HasPrefix(ep.Secret, "whsec_") {
		t.Fatalf("created %+v", ep)
	}
	decodeJSON(t, call(http.MethodPatch, "/endpoints/"+ep.ID, map[string]any{"description": "renamed"}, http.StatusOK), &ep)
	if ep.Description != "renamed" || ep.URL != f.Receiver.URL+"/acme-api" {
		t.Errorf("patched %+v", ep)
	}
	if b := call(http.MethodPost, "/endpoints/"+ep.ID+"/disable", nil, http.StatusOK); !strings.Contains(b, `"enabled":false`) {
		t.Errorf("disable: %s", b)
	}
	call(http.MethodPost, "/endpoints/"+ep.ID+"/enable", nil, http.StatusOK)
	if b := call(http.MethodGet, "/endpoints/"+ep.ID+"/secret", nil, http.StatusOK); !strings.Contains(b, ep.Secret) {
		t.Errorf("secret: %s", b)
	}
	if b := call(http.MethodPost, "/endpoints/"+ep.ID+"/rotate-secret", map[string]any{"keep_seconds": 60}, http.StatusOK); strings.Contains(b, ep.Secret) || !strings.Contains(b, "old_secret_expires_at") {
		t.Errorf("rotate: %s", b)
	}
	call(http.MethodPost, "/endpoints/"+ep.ID+"/test", map[string]any{}, http.StatusAccepted)
	f.Drain(t)
	var page deliveryPage
	decodeJSON(t, call(http.MethodGet, "/deliveries?endpoint="+ep.ID+"&limit=1", nil, http.StatusOK), &page)
	if len(page.Deliveries) != 1 || page.Deliveries[0].EventType != webhook.TestEventType || page.NextCursor == "" {
		t.Fatalf("deliveries of the new endpoint: %+v", page)
	}
	var d webhook.DeliveryRecord
	decodeJSON(t, call(http.MethodGet, "/deliveries/"+page.Deliveries[0].ID, nil, http.StatusOK), &d)
	if len(d.Log) != 1 || d.Log[0].StatusCode != 200 || d.Log[0].Excerpt != "ok from acme-receiver" {
		t.Errorf("the delivery's attempts: %+v", d.Log)
	}
	decodeJSON(t, call(http.MethodGet, "/deliveries?endpoint="+ep.ID+"&limit=1&cursor="+page.NextCursor, nil, http.StatusOK), &page)
	if len(page.Deliveries) != 0 {
		t.Errorf("the page after the only delivery: %+v", page)
	}
	if b := call(http.MethodPost, "/events/"+d.EventID+"/replay", nil, http.StatusOK); !strings.Contains(b, `"Deliveries":1`) {
		t.Errorf("replay: %s", b)
	}
	if b := call(http.MethodGet, "/endpoints/"+ep.ID+"/health", nil, http.StatusOK); !strings.Contains(b, `"windows"`) {
		t.Errorf("health: %s", b)
	}
	call(http.MethodGet, "/event-types", nil, http.StatusOK)
	call(http.MethodPost, "/endpoints/"+ep.ID+"/recover", map[string]any{"since": time.Now().Add(-time.Hour)}, http.StatusOK)
	call(http.MethodDelete, "/endpoints/"+ep.ID, nil, http.StatusNoContent)
	call(http.MethodGet, "/endpoints/"+ep.ID, nil, http.StatusNotFound)

	var actions string
	if err := f.Pool.QueryRow(ctx, `SELECT string_agg(action, ' ' ORDER BY id), count(DISTINCT session) FROM portal_audit WHERE tenant_id = 'acme'`).Scan(&actions, new(int)); err != nil {
		t.Fatal(err)
	}
	if actions != "endpoint.create endpoint.update endpoint.disable endpoint.enable endpoint.secret.reveal endpoint.secret.rotate endpoint.test event.replay endpoint.recover endpoint.delete" {
		t.Errorf("audit: %s", actions)
	}
	if strings.Contains(f.logs.String(), ep.Secret) || strings.Contains(f.logs.String(), acme) {
		t.Errorf("the log shows a secret or the token")
	}
}

// An application key reads any row's story, and mints portal links and
// tenant tokens.
func TestAppKey_StoriesLinksTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	code, body := f.call(t, http.MethodGet, Prefix+"/stories/"+f.GlobexDelivery, f.appKey, nil)
	if code != http.StatusOK || !strings.Contains(body, `"delivery"`) || strings.Contains(body, "whsec_") {
		t.Errorf("a delivery's story: %d %s", code, body)
	}
	if code, body := f.call(t, http.MethodGet, Prefix+"/stories/INV-404", f.appKey, nil); code != http.StatusNotFound {
		t.Errorf("a story of nothing: %d %s", code, body)
	}
	if code, body := f.call(t, http.MethodGet, Prefix+"/stories/x?kind=planet", f.appKey, nil); code != http.StatusBadRequest || !strings.Contains(body, `"field":"kind"`) {
		t.Errorf("a story of a bad kind: %d %s", code, body)
	}
	code, body = f.call(t, http.MethodPost, Prefix+"/tenants/acme/portal-links", f.appKey, map[string]any{"ttl_seconds": 60})
	if code != http.StatusCreated || !strings.Contains(body, `"path":"/portal/open?token=v1.`) {
		t.Errorf("a portal link: %d %s", code, body)
	}
	if code, body := f.call(t, http.MethodPost, Prefix+"/tenants/acme/portal-links", f.appKey, map[string]any{"ttl_seconds": 7 * 86400}); code != http.StatusBadRequest || !strings.Contains(body, `"field":"ttl_seconds"`) {
		t.Errorf("a link of a week: %d %s", code, body)
	}
	if code, _ := f.call(t, http.MethodGet, Prefix+"/openapi.yaml", "", nil); code != http.StatusOK {
		t.Errorf("the OpenAPI description: %d", code)
	}
}
