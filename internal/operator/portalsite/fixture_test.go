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
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/portaltoken"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/twotenants"
	"github.com/postbox/postbox/portal"
)

// fixture is a database with two tenants' endpoints, an event delivered
// to each (twotenants), and the portal on it.
type fixture struct {
	*twotenants.World
	keys   [][]byte // the portal's, newest first
	server *httptest.Server
	logs   *logbuf.Buffer
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
	f := &fixture{World: twotenants.New(t), keys: keys, logs: &logbuf.Buffer{}}
	f.server = httptest.NewServer(f.portal(t, keys...))
	t.Cleanup(f.server.Close)
	return f
}

// portal is a portal on the fixture's database with keys.
func (f *fixture) portal(t *testing.T, keys ...[]byte) *Portal {
	t.Helper()
	p, err := New(Config{DB: f.Pool, Settings: Settings{Keys: keys}, Dispatcher: f.Dispatcher, Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
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
