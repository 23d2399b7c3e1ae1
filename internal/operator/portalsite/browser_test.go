package portalsite

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/postbox/postbox/internal/tooling/testsupport/headless"
	"github.com/postbox/postbox/webhook"
)

// A tenant, in chromium: opens the portal by its link, creates an
// endpoint, sends it a test event, sees the attempt, rotates the secret,
// replays the event — a screenshot of each page kept.
func TestBrowser_TenantManagesItsEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := headless.NewTab(t)
	shot := headless.Shooter(t, ctx, headless.ScreenshotDir(t, filepath.Join("..", "..", "..")), "portal")

	first := link(t, f.keys[0], "acme", 0)
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+first), chromedp.WaitVisible(chromedp.ID("create")))
	if loc := headless.Location(t, ctx); loc != f.server.URL+Prefix+"/" {
		t.Fatalf("the link landed on %s, want the portal's first page (the token out of the address bar)", loc)
	}
	if got := headless.Text(t, ctx, "#tenant"); got != "acme" {
		t.Fatalf("the header names tenant %q", got)
	}
	shot("endpoints")

	// Create an endpoint: its secret is shown once.
	headless.Do(t, ctx,
		chromedp.SendKeys(chromedp.CSS(`#create input[name=url]`), f.Receiver.URL+"/acme-browser"),
		chromedp.SendKeys(chromedp.CSS(`#create input[name=description]`), "billing service"),
		chromedp.Submit(chromedp.CSS(`#create`)),
		chromedp.WaitVisible(chromedp.ID("secret")))
	created := headless.Text(t, ctx, "#secret")
	if !strings.HasPrefix(created, "whsec_") {
		t.Fatalf("the new endpoint's page shows %q, want its secret", created)
	}
	shot("created")
	eps, err := mustScope(t, "acme").ListEndpoints(context.Background(), f.Pool)
	if err != nil || len(eps) != 2 {
		t.Fatalf("acme has %d endpoints (%v), want 2", len(eps), err)
	}
	ep := eps[1]

	// Send it a test event; the lanes deliver it; its attempt shows.
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+Prefix+"/endpoints/"+ep.ID), chromedp.WaitVisible(chromedp.ID("send-test")))
	shot("endpoint")
	headless.Do(t, ctx, chromedp.Submit(chromedp.CSS(`#send-test`)), chromedp.WaitVisible(chromedp.ID("flash")))
	if got := headless.Text(t, ctx, "#flash"); !strings.Contains(got, "test postbox.test event is on its way") {
		t.Fatalf("after send-test the page says %q", got)
	}
	if _, err := f.Dispatcher.Drain(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+Prefix+"/deliveries?endpoint="+ep.ID), chromedp.WaitVisible(chromedp.ID("deliveries")))
	shot("deliveries")
	headless.Do(t, ctx, chromedp.Click(chromedp.CSS(`a.delivery`)), chromedp.WaitVisible(chromedp.ID("attempts")))
	if got := headless.Text(t, ctx, "#attempts"); !strings.Contains(got, "200") || !strings.Contains(got, "ok from acme-receiver") {
		t.Fatalf("the attempt shows %q, want 200 and the receiver's answer", got)
	}
	shot("delivery")

	// Replay the event from its delivery.
	headless.Do(t, ctx, chromedp.Submit(chromedp.CSS(`#replay`)), chromedp.WaitVisible(chromedp.ID("flash")))
	if got := headless.Text(t, ctx, "#flash"); !strings.Contains(got, "Replayed as event") || !strings.Contains(got, "1 delivered") {
		t.Fatalf("after replay the page says %q", got)
	}
	shot("replayed")

	// Rotate the secret: a new one, the old one signing beside it.
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+Prefix+"/endpoints/"+ep.ID), chromedp.WaitVisible(chromedp.ID("rotate")),
		chromedp.Submit(chromedp.CSS(`#rotate`)), chromedp.WaitVisible(chromedp.ID("secret")))
	rotated := headless.Text(t, ctx, "#secret")
	if now, _ := webhook.EndpointSecret(context.Background(), f.Pool, ep.ID); rotated == created || rotated != now {
		t.Fatalf("after rotation the page shows %q; the endpoint's secret is %q, the old one was %q", rotated, now, created)
	}
	shot("rotated")
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+Prefix+"/event-types"), chromedp.WaitVisible(chromedp.CSS("main")))
	shot("event-types")

	// The link again: spent, it opens nothing, and says so.
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+first), chromedp.WaitVisible(chromedp.ID("closed")))
	if got := headless.Text(t, ctx, "#closed"); !strings.Contains(got, "already been used") {
		t.Fatalf("the spent link's page says %q", got)
	}
	shot("link-used")
}

// A page of another site that posts a form to the portal, in the
// tenant's own browser, is refused and changes nothing.
func TestBrowser_CrossSiteFormIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := headless.NewTab(t)
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+link(t, f.keys[0], "acme", 0)), chromedp.WaitVisible(chromedp.ID("create")))
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// A form that submits itself needs script; this page is the
		// attacker's, under no CSP of ours.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s%s/endpoints/%s/delete"><input name="confirm" value="yes"></form>
<script>document.getElementById("f").submit()</script>`, f.server.URL, Prefix, f.Acme.ID)
	}))
	defer evil.Close()
	headless.Do(t, ctx, chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS("main")))
	// Refused either way: for a form without its token (the cookie
	// came along), or for no session (the browser kept the SameSite=Strict
	// cookie back).
	if got := headless.Text(t, ctx, "main"); !strings.Contains(got, "did not come from your portal page") && !strings.Contains(got, "not signed in") {
		t.Fatalf("the cross-site POST got %q", got)
	}
	if _, err := webhook.GetEndpoint(context.Background(), f.Pool, f.Acme.ID); err != nil {
		t.Fatalf("the cross-site POST deleted the endpoint: %v", err)
	}
}

// What a tenant, an application or a receiver wrote — an endpoint's URL
// and description, an event type, a catalog example (a payload), a
// receiver's answer — is text in the DOM: no element, attribute or link
// of it, whatever the CSP would have stopped.
func TestBrowser_NoMarkupFromWhatOthersWrote(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bctx := context.Background()
	const script = `<script>window.__xss="x"</script>`
	const img = `<img src=x onerror="window.__xss='img'">`
	// An event type's name may hold markup too: no spaces, no control
	// characters, nothing else refused.
	typeXSS := `x<script>window.__xss="type"</script>`
	example := []byte(`{"note":"` + strings.ReplaceAll(script+img, `"`, `\"`) + `"}`)
	if _, err := webhook.SyncEventTypes(bctx, f.Pool, []webhook.EventType{
		{Name: "invoice.paid", Description: "paid " + script + img, Example: example},
		{Name: typeXSS, Description: "a type named with markup", Example: example},
	}); err != nil {
		t.Fatal(err)
	}
	acme := f.signIn(t, "acme")
	if code, body := acme.submit(Prefix+"/", "create", urlValues("url", f.Receiver.URL+"/acme-xss?q="+script, "description", script+img,
		"event_types", "invoice.paid, "+typeXSS)); code != http.StatusCreated {
		t.Fatalf("create: %d:\n%s", code, body)
	}
	if code, body := acme.submit(Prefix+"/", "create", urlValues("url", "javascript:alert(1)")); code != http.StatusBadRequest {
		t.Fatalf("a javascript: URL: %d:\n%s", code, body)
	}
	eps, err := mustScope(t, "acme").ListEndpoints(bctx, f.Pool)
	if err != nil || len(eps) != 2 {
		t.Fatalf("%d endpoints, %v", len(eps), err)
	}
	xss := eps[1]
	for _, typ := range []string{"invoice.paid", typeXSS} {
		if code, body := acme.submit(Prefix+"/endpoints/"+xss.ID, "send-test", urlValues("type", typ)); code != http.StatusOK {
			t.Fatalf("send-test %s: %d:\n%s", typ, code, body)
		}
	}
	if _, err := f.Dispatcher.Drain(bctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var delivery string
	if err := f.Pool.QueryRow(bctx, `SELECT d.id::text FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
		WHERE d.endpoint_id = $1 AND e.event_type = $2`, xss.ID, typeXSS).Scan(&delivery); err != nil {
		t.Fatal(err)
	}

	ctx := headless.NewTab(t)
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+link(t, f.keys[0], "acme", 0)), chromedp.WaitVisible(chromedp.ID("create")))
	for _, tc := range []struct {
		page   string
		asText bool // the page shows what was injected in its text
	}{
		{Prefix + "/", true}, {Prefix + "/endpoints/" + xss.ID, true}, {Prefix + "/deliveries", true},
		{Prefix + "/deliveries/" + delivery, true}, {Prefix + "/event-types", true}, {Prefix + "/deliveries?type=" + url.QueryEscape(script), false},
	} {
		page := tc.page
		headless.Do(t, ctx, chromedp.Navigate(f.server.URL+page), chromedp.WaitVisible(chromedp.CSS("main")))
		found, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
			scripts: document.querySelectorAll("script").length,
			handlers: document.querySelectorAll("[onerror],[onload],[onclick]").length,
			imgs: Array.from(document.images).filter(i => !i.src.startsWith("data:")).length,
			jsLinks: document.querySelectorAll('a[href^="javascript:"],form[action^="javascript:"]').length,
			ran: typeof window.__xss})`))
		if err != nil {
			t.Fatal(err)
		}
		if found != `{"scripts":0,"handlers":0,"imgs":0,"jsLinks":0,"ran":"undefined"}` {
			t.Errorf("%s: markup from what others wrote reached the DOM: %s", page, found)
		}
		if dom := headless.HTML(t, ctx); tc.asText && !strings.Contains(dom, "&lt;script&gt;") {
			t.Errorf("%s does not show the injected text as text", page)
		}
	}
}
