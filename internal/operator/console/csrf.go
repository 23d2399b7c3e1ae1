package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// CSRF protection is a double-submit token bound to its session: each
// browser gets a random cookie, and every form carries
// HMAC(key, cookie ‖ user). A forged cross-site POST carries the cookie
// (SameSite=Strict keeps even that out of most browsers) but cannot read it
// to compute the token; a token lifted from one user's page fails for
// another user or another browser. The key is random per process unless
// configured, so a restart invalidates open forms: reload and resubmit.

const csrfCookie = "postbox_console_session"

// csrfField is the form field the token travels in.
const csrfField = "csrf"

// session returns the browser's session value, setting a new cookie when
// it has none.
func (c *Console) session(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: c.prefix + "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return v
}

// token is the CSRF token for a session and user.
func (c *Console) token(session, user string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte(session))
	m.Write([]byte{0})
	m.Write([]byte(user))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether a POST carries the token of its session and
// user.
func (c *Console) checkCSRF(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) < 32 {
		return false
	}
	got := r.PostFormValue(csrfField)
	want := c.token(ck.Value, user(r))
	return got != "" && hmac.Equal([]byte(got), []byte(want))
}

// sign and verify protect the one-line result an action redirects with,
// so a crafted link cannot make the console say something it did not do.
func (c *Console) sign(msg string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte("flash\x00" + msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (c *Console) verify(msg, sig string) bool {
	return msg != "" && hmac.Equal([]byte(sig), []byte(c.sign(msg)))
}

// user is the basic-auth user who made the request, for the action log.
// Without credentials configured (development only: production refuses
// the console) there is none.
func user(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return u
	}
	return "anonymous (no RIVERUI_USERNAME configured)"
}
