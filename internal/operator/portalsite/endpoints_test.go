package portalsite

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/operator/console"
	"github.com/postbox/postbox/internal/operator/story"
	"github.com/postbox/postbox/webhook"
)

// Every route that takes an id — an endpoint's, a delivery's, an
// event's, in the path or the query — given another tenant's, answers byte
// for byte as for an id nothing has, shows nothing of the other tenant's
// and changes nothing of it. The routes come from Routes, so one added
// there is covered here without being named.
func TestIsolation_AnotherTenantsIDsAreNoIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.signIn(t, "acme")
	token := acme.csrfOf()
	form := url.Values{"csrf": {token}, "url": {"https://moved.example/x"}, "description": {"moved"}, "event_types": {""},
		"confirm": {"yes"}, "since": {"24h"}, "type": {"postbox.test"}}
	const none = "00000000-0000-4000-8000-000000000000"
	// The globex id each kind of path names.
	others := map[string]string{"endpoints": f.Globex.ID, "deliveries": f.GlobexDelivery, "events": f.GlobexEvent}
	type probe struct{ name, method, path, other string }
	var probes []probe
	for _, rt := range Routes {
		method, path, _ := strings.Cut(rt.Pattern, " ")
		if !strings.Contains(path, "{id}") {
			continue
		}
		kind := strings.Split(strings.TrimPrefix(path, Prefix+"/"), "/")[0]
		other, ok := others[kind]
		if !ok {
			t.Fatalf("route %s: no other tenant's id for %q here", rt.Pattern, kind)
		}
		actions := []string{""}
		if strings.Contains(path, "{action}") {
			actions = Actions
		}
		for _, action := range actions {
			probes = append(probes, probe{rt.Pattern + " " + action, method, strings.Replace(path, "{action}", action, 1), other})
		}
	}
	// Ids in the query.
	probes = append(probes,
		probe{"deliveries ?endpoint=", http.MethodGet, Prefix + "/deliveries?endpoint={id}", f.Globex.ID},
		probe{"deliveries ?before=", http.MethodGet, Prefix + "/deliveries?before={id}", f.GlobexDelivery})
	for _, pr := range probes {
		at := func(id string) (int, string) {
			p := strings.Replace(pr.path, "{id}", id, 1)
			if pr.method == http.MethodGet {
				return acme.get(p)
			}
			return acme.post(p, form)
		}
		before := f.Snapshot(t)
		codeOther, bodyOther := at(pr.other)
		codeNone, bodyNone := at(none)
		if codeOther != http.StatusNotFound || codeOther != codeNone || bodyOther != bodyNone {
			t.Errorf("%s: another tenant's id answered %d, one that does not exist %d:\n%s\n---\n%s", pr.name, codeOther, codeNone, bodyOther, bodyNone)
		}
		for _, leak := range append(f.Leaks(t), pr.other) {
			if strings.Contains(bodyOther, leak) {
				t.Errorf("%s: the answer shows %q of another tenant's", pr.name, leak)
			}
		}
		if after := f.Snapshot(t); after != before {
			t.Errorf("%s changed another tenant's rows:\n%s\n%s", pr.name, before, after)
		}
	}
	if len(probes) < 12 {
		t.Fatalf("only %d probes", len(probes))
	}
	// Lists show the tenant's own rows and no one else's.
	for _, p := range []string{Prefix + "/", Prefix + "/deliveries"} {
		_, page := acme.get(p)
		if !strings.Contains(page, "acme-in") || strings.Contains(page, "globex") {
			t.Errorf("%s is not acme's alone:\n%s", p, page)
		}
	}
	if n := count(t, f.Pool, `SELECT count(*) FROM portal_audit WHERE tenant_id = 'acme' AND action <> 'session.open'`); n != 0 {
		t.Errorf("%d actions were audited, but none happened", n)
	}
}

// Each form does what it says to the tenant's own endpoint, as the page
// renders it, and each change is audited with the session that made it.
func TestActions_ChangeTheTenantsOwnEndpointAndAreAudited(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.signIn(t, "acme")
	ctx := context.Background()
	page := Prefix + "/endpoints/" + f.Acme.ID

	code, body := acme.submit(Prefix+"/", "create", url.Values{"url": {"https://new.acme.example/hooks"}, "description": {"the new one"}, "event_types": {"invoice.paid, invoice.voided"}})
	secret := shownSecret(body)
	if code != http.StatusCreated || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("create: %d, want 201 with the secret:\n%s", code, body)
	}
	var created webhook.Endpoint
	if eps, err := mustScope(t, "acme").ListEndpoints(ctx, f.Pool); err != nil || len(eps) != 2 {
		t.Fatalf("after create acme has %d endpoints (%v), want 2", len(eps), err)
	} else {
		created = eps[1]
	}
	if created.Description != "the new one" || strings.Join(created.EventTypes, ",") != "invoice.paid,invoice.voided" || created.Tenant != "acme" {
		t.Errorf("created %+v", created)
	}
	if got, _ := webhook.EndpointSecret(ctx, f.Pool, created.ID); got != secret {
		t.Errorf("the page showed a secret that is not the endpoint's: %q vs %q (%s)", got, secret, created.ID)
	}

	if code, body := acme.submit(page, "edit", url.Values{"url": {"https://acme-in/v2"}, "description": {"edited"}, "event_types": {""}}); code != http.StatusOK || !strings.Contains(body, "Saved.") {
		t.Fatalf("edit: %d:\n%s", code, body)
	}
	if code, body := acme.submit(page, "disable", nil); code != http.StatusOK || !strings.Contains(body, "disabled in the portal") {
		t.Fatalf("disable: %d:\n%s", code, body)
	}
	if code, body := acme.submit(page, "enable", nil); code != http.StatusOK || !strings.Contains(body, "Endpoint enabled.") {
		t.Fatalf("enable: %d:\n%s", code, body)
	}
	code, body = acme.submit(page, "reveal", nil)
	if want, _ := webhook.EndpointSecret(ctx, f.Pool, f.Acme.ID); code != http.StatusOK || shownSecret(body) != want {
		t.Fatalf("reveal: %d, want the secret:\n%s", code, body)
	}
	code, body = acme.submit(page, "rotate", nil)
	rotated, _ := webhook.EndpointSecret(ctx, f.Pool, f.Acme.ID)
	if code != http.StatusOK || rotated == f.Acme.Secret || shownSecret(body) != rotated || !strings.Contains(body, "keeps signing beside it") {
		t.Fatalf("rotate: %d, want the new secret and the old one's overlap:\n%s", code, body)
	}
	if code, body := acme.submit(page, "delete", nil); code != http.StatusBadRequest || !strings.Contains(body, "Not deleted") {
		t.Fatalf("delete without the box ticked: %d:\n%s", code, body)
	}
	if code, body := acme.submit(page, "delete", url.Values{"confirm": {"yes"}}); code != http.StatusOK || !strings.Contains(body, "Endpoint deleted.") {
		t.Fatalf("delete: %d:\n%s", code, body)
	}
	ep, err := webhook.GetEndpoint(ctx, f.Pool, created.ID)
	if err != nil || ep.URL != "https://new.acme.example/hooks" {
		t.Errorf("the new endpoint: %+v, %v", ep, err)
	}
	if _, err := webhook.GetEndpoint(ctx, f.Pool, f.Acme.ID); err == nil {
		t.Errorf("the deleted endpoint is still there")
	}

	// The operator sees the actions: worker show of the endpoint, and the
	// console's page of the tenant's endpoints.
	st, err := story.Find(ctx, f.Pool, created.ID, story.KindEndpoint)
	var shown strings.Builder
	if err == nil {
		err = story.WriteText(&shown, st)
	}
	if err != nil || len(st.PortalActions) != 1 || st.PortalActions[0].Action != "endpoint.create" || !strings.Contains(shown.String(), "endpoint.create by tenant acme") {
		t.Errorf("worker show of the created endpoint: %v, %+v:\n%s", err, st.PortalActions, shown.String())
	}
	con, err := console.New(console.Config{DB: f.Pool})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	con.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/endpoints?tenant=acme", nil))
	for _, want := range []string{"In the tenant portal", "endpoint.secret.rotate", "endpoint.delete"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("the console's endpoints of acme lack %q:\n%s", want, w.Body.String())
		}
	}

	rows, err := f.Pool.Query(ctx, `SELECT action, target, session FROM portal_audit WHERE tenant_id = 'acme' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	sessions := map[string]bool{}
	for rows.Next() {
		var action, target, session string
		if err := rows.Scan(&action, &target, &session); err != nil {
			t.Fatal(err)
		}
		got = append(got, action+" "+target)
		sessions[session] = true
	}
	want := []string{"session.open ", "endpoint.create " + created.ID, "endpoint.update " + f.Acme.ID, "endpoint.disable " + f.Acme.ID,
		"endpoint.enable " + f.Acme.ID, "endpoint.secret.reveal " + f.Acme.ID, "endpoint.secret.rotate " + f.Acme.ID, "endpoint.delete " + f.Acme.ID}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(sessions) != 1 {
		t.Errorf("audit log:\n%s\nwant, all of one session:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A form posted without its session's token — from another site, another
// browser, another tenant's page — is refused and changes nothing.
func TestCSRF_AFormFromElsewhereIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.signIn(t, "acme")
	acmeElsewhere := f.signIn(t, "acme")
	globex := f.signIn(t, "globex")
	before := count(t, f.Pool, `SELECT count(*) FROM webhook_endpoints`)
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"no token", ""},
		{"a made-up token", "AAAA"},
		{"the same tenant's token from another session", acmeElsewhere.csrfOf()},
		{"another tenant's token", globex.csrfOf()},
	} {
		for _, path := range []string{Prefix + "/endpoints", Prefix + "/endpoints/" + f.Acme.ID + "/disable", Prefix + "/endpoints/" + f.Acme.ID + "/delete"} {
			code, body := acme.post(path, url.Values{"csrf": {tc.token}, "url": {"https://evil.example/"}, "confirm": {"yes"}})
			if code != http.StatusForbidden || !strings.Contains(body, "did not come from your portal page") {
				t.Errorf("%s to %s: %d:\n%s", tc.name, path, code, body)
			}
		}
	}
	ep, err := webhook.GetEndpoint(context.Background(), f.Pool, f.Acme.ID)
	if after := count(t, f.Pool, `SELECT count(*) FROM webhook_endpoints`); after != before || err != nil || !ep.Enabled {
		t.Errorf("refused forms changed something: %d endpoints, was %d; acme's: %+v, %v", after, before, ep, err)
	}
	if !strings.Contains(f.logs.String(), "CSRF") {
		t.Errorf("the refusals were not logged")
	}
}

// What a tenant types is shown as text, never as markup; a javascript:
// URL is refused.
func TestPages_WhatATenantTypesIsText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.signIn(t, "acme")
	const script = `<script>alert(1)</script>`
	if code, body := acme.submit(Prefix+"/", "create", url.Values{"url": {"https://x.example/?q=" + url.QueryEscape(script)},
		"description": {script + `"><img src=x onerror=alert(2)>`}, "event_types": {""}}); code != http.StatusCreated {
		t.Fatalf("create: %d:\n%s", code, body)
	}
	if code, body := acme.submit(Prefix+"/", "create", url.Values{"url": {"javascript:alert(3)"}}); code != http.StatusBadRequest || strings.Contains(body, "<script") {
		t.Errorf("a javascript: URL: %d:\n%s", code, body)
	}
	eps, err := mustScope(t, "acme").ListEndpoints(context.Background(), f.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{Prefix + "/", Prefix + "/endpoints/" + eps[1].ID} {
		_, body := acme.get(p)
		if strings.Contains(body, "<script") || strings.Contains(body, "<img src=x") {
			t.Errorf("%s renders what was typed as markup:\n%s", p, body)
		}
		if !strings.Contains(body, "&lt;script&gt;") {
			t.Errorf("%s does not show the description as text", p)
		}
	}
}

func mustScope(t *testing.T, tenant string) webhook.TenantScope {
	t.Helper()
	s, err := webhook.ForTenant(tenant)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
