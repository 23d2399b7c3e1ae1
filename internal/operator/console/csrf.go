package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"

	"github.com/postbox/postbox/internal/operator/csrf"
)

// CSRF protection (package csrf) binds every form's token to the
// browser's session cookie and the basic-auth user. The key is random per
// process unless configured, so a restart invalidates open forms: reload
// and resubmit.

const csrfCookie = "postbox_console_session"

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
	return csrf.Token(c.csrfKey, session, user)
}

// checkCSRF reports whether a POST carries the token of its session and
// user.
func (c *Console) checkCSRF(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) < 32 {
		return false
	}
	return csrf.Valid(c.csrfKey, ck.Value, user(r), r.PostFormValue(csrf.Field))
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
