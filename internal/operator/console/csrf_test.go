package console

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The session cookie the CSRF token is bound to is SameSite=Strict (a
// cross-site form does not even carry it in most browsers), HttpOnly (no
// script reads it), scoped to the console's prefix, and Secure when the
// console is served over TLS. A browser that already has one keeps it.
func TestSession_CookieIsStrictHttpOnlyAndScoped(t *testing.T) {
	t.Parallel()
	c := &Console{prefix: "/console"}
	for _, tc := range []struct {
		name   string
		tls    bool
		secure bool
	}{
		{"plain HTTP", false, false},
		{"over TLS", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/console/", nil)
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			w := httptest.NewRecorder()
			value := c.session(w, r)
			cookies := w.Result().Cookies()
			if len(cookies) != 1 {
				t.Fatalf("%d cookies set, want the session's", len(cookies))
			}
			ck := cookies[0]
			if ck.Name != csrfCookie || ck.Value != value || len(value) < 32 {
				t.Errorf("cookie %s=%q (session %q), want %s holding the session", ck.Name, ck.Value, value, csrfCookie)
			}
			if ck.SameSite != http.SameSiteStrictMode || !ck.HttpOnly || ck.Path != "/console/" || ck.Secure != tc.secure {
				t.Errorf("cookie SameSite %v, HttpOnly %v, Path %q, Secure %v; want Strict, HttpOnly, /console/, Secure %v",
					ck.SameSite, ck.HttpOnly, ck.Path, ck.Secure, tc.secure)
			}

			again := httptest.NewRequest(http.MethodGet, "/console/", nil)
			again.AddCookie(ck)
			w = httptest.NewRecorder()
			if got := c.session(w, again); got != value || len(w.Result().Cookies()) != 0 {
				t.Errorf("a browser with its cookie got session %q and %d new cookies, want %q and none", got, len(w.Result().Cookies()), value)
			}
		})
	}
}
