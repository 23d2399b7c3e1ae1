package portalsite

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/portaltoken"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/portal"
	"github.com/postbox/postbox/webhook"
)

// fixture is a database with two tenants' endpoints, an event delivered
// to each, and the portal on it.
type fixture struct {
	pool       *pgxpool.Pool
	keys       [][]byte // the portal's, newest first
	server     *httptest.Server
	receiver   *httptest.Server // the endpoints': /acme… answers 200, /globex… 500
	dispatcher *webhook.Dispatcher
	logs       *logbuf.Buffer

	acme, globex                 webhook.Endpoint // each with its secret
	acmeEvent, globexEvent       string
	acmeDelivery, globexDelivery string
}

func newKey(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return []byte(base64.StdEncoding.EncodeToString(b))
}

// newFixture serves a portal with keys (one fresh key when none).
func newFixture(t *testing.T, keys ...[]byte) *fixture {
	t.Helper()
	if len(keys) == 0 {
		keys = [][]byte{newKey(t)}
	}
	f := &fixture{pool: pgtest.NewPool(t), keys: keys, logs: &logbuf.Buffer{}}
	ctx := context.Background()
	f.receiver = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/globex") {
			http.Error(w, "globex receiver says no", http.StatusInternalServerError)
			return
		}
		if strings.Contains(r.URL.Path, "xss") {
			_, _ = w.Write([]byte(`<script>window.__xss="excerpt"</script><img src=x onerror="window.__xss='excerpt-img'">`))
			return
		}
		_, _ = w.Write([]byte("ok from acme-receiver"))
	}))
	t.Cleanup(f.receiver.Close)
	var err error
	f.acme, err = webhook.CreateEndpoint(ctx, f.pool, webhook.Settings{}, webhook.EndpointParams{
		Tenant: "acme", URL: f.receiver.URL + "/acme-in", Description: "acme billing"})
	if err != nil {
		t.Fatal(err)
	}
	f.globex, err = webhook.CreateEndpoint(ctx, f.pool, webhook.Settings{}, webhook.EndpointParams{
		Tenant: "globex", URL: f.receiver.URL + "/globex-secret-path", Description: "globex private description"})
	if err != nil {
		t.Fatal(err)
	}
	f.dispatcher, err = webhook.NewDispatcher(f.pool, webhook.Config{Settings: webhook.Settings{
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.dispatcher.Close)
	for _, tenant := range []string{"acme", "globex"} {
		if err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			_, err := webhook.Enqueuer{}.EnqueueEvent(ctx, tx, webhook.Event{Tenant: tenant, Type: "invoice.paid", Payload: []byte(`{"tenant":"` + tenant + `"}`)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.dispatcher.Drain(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []*webhook.Endpoint{&f.acme, &f.globex} {
		var delivery, event string
		if err := f.pool.QueryRow(ctx, `SELECT id::text, event_id::text FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&delivery, &event); err != nil {
			t.Fatal(err)
		}
		if ep == &f.acme {
			f.acmeDelivery, f.acmeEvent = delivery, event
		} else {
			f.globexDelivery, f.globexEvent = delivery, event
		}
	}
	f.server = httptest.NewServer(f.portal(t, keys...))
	t.Cleanup(f.server.Close)
	return f
}

// portal is a portal on the fixture's database with keys.
func (f *fixture) portal(t *testing.T, keys ...[]byte) *Portal {
	t.Helper()
	p, err := New(Config{DB: f.pool, Settings: Settings{Keys: keys}, Dispatcher: f.dispatcher, Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// link mints a link for tenant with key, valid for ttl.
func link(t *testing.T, key []byte, tenant string, ttl time.Duration) string {
	t.Helper()
	l, err := portal.Link(key, tenant, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// browser is one browser: its own cookies, redirects not followed.
type browser struct {
	t      *testing.T
	server *httptest.Server
	c      *http.Client
}

func (f *fixture) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, server: f.server, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signIn is a browser that opened a fresh link of tenant's.
func (f *fixture) signIn(t *testing.T, tenant string) *browser {
	t.Helper()
	b := f.browser(t)
	if code, body := b.get(link(t, f.keys[0], tenant, 0)); code != http.StatusSeeOther {
		t.Fatalf("opening a fresh link: %d %s", code, body)
	}
	return b
}

func (b *browser) do(req *http.Request) (int, string) {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.server.URL+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.server.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var (
	formRe   = regexp.MustCompile(`(?s)<form[^>]*action="([^"]*)"[^>]*id="([^"]*)"[^>]*>(.*?)</form>`)
	hiddenRe = regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`)
)

// submit posts form id of the page at path as a browser would: the
// form's own action and hidden fields, and values typed in.
func (b *browser) submit(path, id string, values url.Values) (int, string) {
	b.t.Helper()
	code, page := b.get(path)
	if code != http.StatusOK {
		b.t.Fatalf("GET %s: %d %s", path, code, page)
	}
	for _, m := range formRe.FindAllStringSubmatch(page, -1) {
		if m[2] != id {
			continue
		}
		form := url.Values{}
		for _, h := range hiddenRe.FindAllStringSubmatch(m[3], -1) {
			form.Set(h[1], unescape(h[2]))
		}
		for k, v := range values {
			form[k] = v
		}
		return b.post(unescape(m[1]), form)
	}
	b.t.Fatalf("GET %s has no form %q:\n%s", path, id, page)
	return 0, ""
}

// unescape undoes html/template's escaping.
func unescape(s string) string { return html.UnescapeString(s) }

// shownSecret is the secret a page shows, "" when it shows none.
func shownSecret(page string) string {
	m := regexp.MustCompile(`id="secret">([^<]+)<`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return unescape(m[1])
}

// csrfOf is the CSRF token on the browser's first page.
func (b *browser) csrfOf() string {
	b.t.Helper()
	_, page := b.get(Prefix + "/")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no CSRF token on the portal's first page:\n%s", page)
	}
	return unescape(m[1])
}

// signed is a token of claims under key for purpose, for links the Go API
// would refuse to mint.
func signed(t *testing.T, key []byte, purpose string, c portaltoken.Claims) string {
	t.Helper()
	s, err := portaltoken.Sign(key, purpose, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// count runs a count query.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// regexpFind is the first group of re in s, "" when it does not match.
func regexpFind(s, re string) string {
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[1]
}

// urlValues is a form of name, value pairs.
func urlValues(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}
