package portalsite

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/portaltoken"
)

// A link opens the portal once; every other link gets a plain page that
// says why it opened nothing.
func TestOpen_ALinkOpensOnceAndOnlyIfSigned(t *testing.T) {
	t.Parallel()
	other := newKey(t)
	f := newFixture(t)
	used := link(t, f.keys[0], "acme", 0)
	f.signIn(t, "acme") // a different link, spent
	if code, _ := f.browser(t).get(used); code != http.StatusSeeOther {
		t.Fatalf("a fresh link did not open")
	}
	fresh := func() portaltoken.Claims {
		return portaltoken.Claims{Tenant: "acme", Nonce: portaltoken.NewNonce(), Expires: time.Now().Add(time.Minute).Unix()}
	}
	expired := fresh()
	expired.Expires = time.Now().Add(-time.Second).Unix()
	good := signed(t, f.keys[0], portaltoken.PurposeLink, fresh())
	tampered := strings.Replace(good, ".", ".e30", 1)
	cases := []struct {
		name, link, want string
	}{
		{"used", used, "already been used"},
		{"expired", "/portal/open?token=" + signed(t, f.keys[0], portaltoken.PurposeLink, expired), "has expired"},
		{"another key's", "/portal/open?token=" + signed(t, other, portaltoken.PurposeLink, fresh()), "not valid"},
		{"altered", "/portal/open?token=" + url.QueryEscape(tampered), "not valid"},
		{"a session cookie's value", "/portal/open?token=" + signed(t, f.keys[0], portaltoken.PurposeSession, fresh()), "not valid"},
		{"no token", "/portal/open", "not valid"},
		{"garbage", "/portal/open?token=v1.%3Cscript%3E.x", "not valid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := f.browser(t)
			code, body := b.get(tc.link)
			if code != http.StatusForbidden || !strings.Contains(body, tc.want) {
				t.Fatalf("%d, want 403 saying %q:\n%s", code, tc.want, body)
			}
			if strings.Contains(body, "acme") || strings.Contains(body, f.Acme.ID) {
				t.Errorf("the refusal names the link's tenant or its endpoints:\n%s", body)
			}
			if code, _ := b.get(Prefix + "/"); code != http.StatusUnauthorized {
				t.Errorf("after a refused link the portal answered %d, want 401", code)
			}
		})
	}
}

// Browsers racing to exchange one link: one session, whatever the timing.
func TestOpen_ConcurrentExchangesOfOneLinkOpenOneSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l := link(t, f.keys[0], "acme", 0)
	const n = 8
	var wg sync.WaitGroup
	codes := make([]int, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			b := f.browser(t)
			<-start
			codes[i], _ = b.get(l)
		})
	}
	close(start)
	wg.Wait()
	opened := 0
	for _, c := range codes {
		if c == http.StatusSeeOther {
			opened++
		} else if c != http.StatusForbidden {
			t.Errorf("an exchange answered %d", c)
		}
	}
	if opened != 1 {
		t.Fatalf("%d of %d exchanges of one link opened a session (%v), want 1", opened, n, codes)
	}
	if n := count(t, f.Pool, `SELECT count(*) FROM portal_audit WHERE action = 'session.open'`); n != 1 {
		t.Errorf("%d session.open audit rows, want 1", n)
	}
}

// Rotating the key: links of the old key still open during the overlap,
// sessions signed with it end at once.
func TestSession_RotatingTheKeyEndsSessionsButOldLinksOpen(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newKey(t), newKey(t)
	before := newFixture(t, oldKey)
	b := before.signIn(t, "acme")
	oldLink := link(t, oldKey, "acme", 0)

	rotated := httptest.NewServer(before.portal(t, newKey, oldKey))
	defer rotated.Close()
	b.server = rotated
	if code, body := b.get(Prefix + "/"); code != http.StatusUnauthorized || !strings.Contains(body, "session has ended") {
		t.Errorf("a session of the old key after rotation: %d, want 401 saying it ended:\n%s", code, body)
	}
	b2 := before.browser(t)
	b2.server = rotated
	if code, body := b2.get(oldLink); code != http.StatusSeeOther {
		t.Fatalf("an old-key link during the overlap: %d %s", code, body)
	}
	if code, body := b2.get(Prefix + "/"); code != http.StatusOK || !strings.Contains(body, "acme-in") {
		t.Errorf("the session it opened: %d:\n%s", code, body)
	}
}

// The session cookie: HttpOnly, SameSite=Strict, scoped to the portal,
// Secure unless the request is plain HTTP from this machine.
func TestSession_CookieAttributes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := f.portal(t, f.keys...)
	for _, tc := range []struct {
		remote     string
		wantSecure bool
	}{{"127.0.0.1:5555", false}, {"[::1]:5555", false}, {"203.0.113.7:5555", true}} {
		req := httptest.NewRequest(http.MethodGet, link(t, f.keys[0], "acme", 0), nil)
		req.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		cookies := w.Result().Cookies()
		if w.Code != http.StatusSeeOther || len(cookies) != 1 {
			t.Fatalf("from %s: %d, %d cookies", tc.remote, w.Code, len(cookies))
		}
		c := cookies[0]
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != Prefix+"/" || c.Secure != tc.wantSecure || c.MaxAge != int(DefaultSessionTTL/time.Second) {
			t.Errorf("from %s: cookie %+v; want HttpOnly, SameSite=Strict, Path=/portal/, Secure=%v, an hour", tc.remote, c, tc.wantSecure)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("CSP %q: want frame-ancestors 'none' without PORTAL_FRAME_ANCESTORS", csp)
		}
	}
}

// A session that expired opens nothing.
func TestSession_Expires(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t)
	b.c.Jar.SetCookies(mustURL(t, f.server.URL+Prefix+"/"), []*http.Cookie{{Name: sessionCookie, Path: Prefix + "/",
		Value: signed(t, f.keys[0], portaltoken.PurposeSession, portaltoken.Claims{Tenant: "acme", Nonce: "s1", Expires: time.Now().Add(-time.Second).Unix()})}})
	if code, body := b.get(Prefix + "/"); code != http.StatusUnauthorized || strings.Contains(body, "acme-in") {
		t.Fatalf("an expired session: %d:\n%s", code, body)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// One address opening links faster than a browser would is slowed down;
// another address is not.
func TestOpen_PacedPerAddress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now()
	p, err := New(Config{DB: f.Pool, Settings: Settings{Keys: f.keys}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	open := func(remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, link(t, f.keys[0], "acme", 0), nil)
		req.RemoteAddr = remote
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		return w
	}
	for i := range opensBurst {
		if w := open("198.51.100.7:1000"); w.Code != http.StatusSeeOther {
			t.Fatalf("open %d: %d", i+1, w.Code)
		}
	}
	w := open("198.51.100.7:1001")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "Too many attempts") {
		t.Fatalf("open %d from one address: %d, Retry-After %q", opensBurst+1, w.Code, w.Header().Get("Retry-After"))
	}
	if w := open("198.51.100.8:1000"); w.Code != http.StatusSeeOther {
		t.Errorf("another address was held back too: %d", w.Code)
	}
	now = now.Add(time.Minute)
	if w := open("198.51.100.7:1002"); w.Code != http.StatusSeeOther {
		t.Errorf("a minute later the address is still held back: %d", w.Code)
	}
}
