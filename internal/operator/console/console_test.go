package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// browser is an HTTP client with its own cookies, optionally sending
// basic auth as a user.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
	user string
}

func (f *fixture) browser(t *testing.T, user string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, c: &http.Client{Jar: jar}, base: f.server.URL, user: user}
}

func (b *browser) do(method, path string, form url.Values) (int, string, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.user != "" {
		req.SetBasicAuth(b.user, "pw")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), resp.Request.URL.Path
}

func (b *browser) get(path string) (int, string) {
	code, body, _ := b.do(http.MethodGet, path, nil)
	return code, body
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token opens the action's confirmation page and returns its CSRF token.
func (b *browser) token(action, id string) string {
	b.t.Helper()
	code, body := b.get("/console/confirm/" + action + "?id=" + id)
	m := csrfRE.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		b.t.Fatalf("confirm page of %s %s: %d, no token:\n%s", action, id, code, body)
	}
	return m[1]
}

// Every page answers with the story it is about, and bad input with a
// clear error.
func TestPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t, "")
	// What a page must not show: another tenant's endpoints.
	absent := map[string][]string{"a tenant's endpoints": {f.goodEP.URL, f.badEP.URL}}
	for _, tc := range []struct {
		name, path string
		code       int
		want       []string
	}{
		{"home", "/console/", 200, []string{"webhook_deliveries", "oldest due", "<svg", `id="priorities"`, `id="customers"`}},
		{"search invoice", "/console/search?q=INV-1042", 200, []string{"Invoice INV-1042", f.failedID, f.sentID,
			"update_url</code> sealed", "pdf</code> sealed", "scrubbed", "worker requeue email " + f.failedID,
			"send a new email: a sent row&#39;s links and PDF are gone"}},
		{"customer", "/console/customer/cus_42", 200, []string{f.retryingID, f.failedID, "password_reset_url</code> present",
			"connection refused", "none needed: it is retried at"}},
		{"recipient", "/console/search?q=ada@example.com", 200, []string{"Emails to ada@example.com", f.retryingID, f.failedID}},
		{"river ui link", "/console/email/" + f.sentID, 200, []string{fmt.Sprintf(`<a href="/riverui/jobs/%d">shift job %d</a>`, f.jobID, f.jobID),
			"postbox_r_host_1", "<td>sent</td>"}},
		{"suppressed", "/console/email/" + f.suppressedID, 200, []string{"suppressed</span> hard bounce: 550 no such user", "lift the suppression first"}},
		{"skipped", "/console/email/" + f.skippedID, 200, []string{"skipped by its renderer", "organisation deleted"}},
		{"fresh", "/console/search?q=" + f.freshID, 200, []string{"scheduled for ", "/confirm/cancel-email?id=" + f.freshID}}, // due in an hour, never attempted
		{"event", "/console/search?q=" + f.eventID, 200, []string{"invoice.paid", "internal error at the receiver", "502",
			"10s", "context deadline exceeded", "35ms", f.goodDelivery, f.badDelivery, "Replay this event"}},
		{"delivery", "/console/search?q=" + f.badDelivery, 200, []string{"Delivery " + f.badDelivery, "bad gateway", "Replay its event"}},
		{"endpoint", "/console/search?q=" + f.badEP.ID, 200, []string{f.badEP.URL, `id="consecutive">3<`, "0.0%",
			"context deadline exceeded", "present (never shown)", "Replay failed since", "Disable"}},
		{"disabled endpoint", "/console/endpoint/" + f.offEP.ID, 200, []string{"answered 410 Gone", "Enable"}},
		{"webhook outbox", "/console/search?q=" + f.failedOutboxID, 200, []string{"fan-out: connection reset", "requeue-webhook-outbox"}},
		{"failed", "/console/failed", 200, []string{f.failedID, f.suppressedID, f.badDelivery, f.failedOutboxID}},
		{"endpoints", "/console/endpoints", 200, []string{f.goodEP.URL, f.badEP.URL, "answered 410 Gone", f.acmeEP.URL, "<td>acme</td>"}},
		{"a tenant's endpoints", "/console/endpoints?tenant=acme", 200, []string{f.acmeEP.URL, "Endpoints of tenant acme"}},
		{"a tenant's endpoint", "/console/endpoint/" + f.acmeEP.ID, 200, []string{`of tenant <b class="tenant">acme</b>`}},
		{"a tenant with a control character", "/console/endpoints?tenant=ac%01me", 400, []string{"control characters"}},
		{"forced kind", "/console/search?q=cus_42&kind=customer", 200, []string{"Customer cus_42"}},

		{"unknown id", "/console/search?q=00000000-0000-4000-8000-000000000000", 404, []string{"nothing matches",
			"email_outbox by id", "webhook_events by id", "webhook_endpoints by id"}},
		{"unknown email page", "/console/email/00000000-0000-4000-8000-000000000000", 404, []string{"nothing matches", "email_outbox by id"}},
		{"unknown invoice", "/console/search?q=INV-404", 404, []string{"nothing matches &#34;INV-404&#34;", "by invoice_id", "by customer_id"}},
		{"malformed uuid", "/console/search?q=1234abcd-12-1234-1234-1234567890ab", 400, []string{"not a UUID"}},
		{"malformed uuid page", "/console/event/not-a-uuid", 400, []string{"takes a UUID"}},
		{"bad kind", "/console/search?q=x&kind=bogus", 400, []string{"kind &#34;bogus&#34; is not one of"}},
		{"invalid UTF-8 search", "/console/search?q=%FF", 400, []string{"invalid UTF-8 or a NUL byte"}},
		{"NUL in a customer page", "/console/customer/a%00b", 400, []string{"invalid UTF-8 or a NUL byte"}},
		{"overlong UTF-8 invoice page", "/console/invoice/%C0%AF", 400, []string{"invalid UTF-8 or a NUL byte"}},
		{"no such page", "/console/nowhere/at/all", 404, []string{"No such console page"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := b.get(tc.path)
			if code != tc.code {
				t.Fatalf("GET %s: %d, want %d:\n%s", tc.path, code, tc.code, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %q:\n%s", tc.path, w, body)
				}
			}
			for _, a := range absent[tc.name] {
				if strings.Contains(body, a) {
					t.Errorf("GET %s shows %q, which it must not:\n%s", tc.path, a, body)
				}
			}
		})
	}
}

// No page shows a secret value: the crawl follows every console link from
// the home page, the failed rows and every seeded row's page, and each
// confirmation page, and finds none of the seeded secrets.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t, "")
	pages := crawl(t, b, f.seeds())
	if len(pages) < 20 {
		t.Fatalf("crawled only %d pages", len(pages))
	}
	states := map[string]bool{}
	for path, body := range pages {
		for _, s := range f.secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s shows the secret %q", path, s)
			}
		}
		for _, st := range []string{"sealed", "present", "scrubbed"} {
			if strings.Contains(body, "</code> "+st) {
				states[st] = true
			}
		}
	}
	if len(states) != 3 {
		t.Fatalf("the crawl saw secret states %v, want sealed, present and scrubbed: the check proves nothing without them", states)
	}
}

// seeds are the pages a crawl starts from.
func (f *fixture) seeds() []string {
	s := []string{"/console/", "/console/failed", "/console/endpoints"}
	for _, id := range []string{f.failedID, f.sentID, f.retryingID, f.skippedID, f.freshID, f.suppressedID,
		f.eventID, f.goodDelivery, f.badDelivery, f.goodEP.ID, f.badEP.ID, f.offEP.ID, f.failedOutboxID, "INV-1042", "cus_42", "ada@example.com"} {
		s = append(s, "/console/search?q="+url.QueryEscape(id))
	}
	return s
}

var hrefRE = regexp.MustCompile(`href="(/console/[^"]*)"`)

// crawl GETs every console page reachable from seeds and returns each
// body by path.
func crawl(t *testing.T, b *browser, seeds []string) map[string]string {
	t.Helper()
	seen := map[string]string{}
	queue := append([]string(nil), seeds...)
	for len(queue) > 0 && len(seen) < 500 {
		p := strings.ReplaceAll(queue[0], "&amp;", "&")
		queue = queue[1:]
		if _, ok := seen[p]; ok {
			continue
		}
		code, body, final := b.do(http.MethodGet, p, nil)
		if code != http.StatusOK {
			t.Errorf("GET %s (→ %s): %d", p, final, code)
		}
		seen[p] = body
		for _, m := range hrefRE.FindAllStringSubmatch(body, -1) {
			queue = append(queue, m[1])
		}
	}
	return seen
}
