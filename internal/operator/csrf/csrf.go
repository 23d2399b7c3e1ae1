// Package csrf makes and checks the tokens every form of the operator
// console and the tenant portal carries.
//
// A token is HMAC(key, session ‖ 0 ‖ principal): bound to the browser's
// session (a cookie value the page's own origin set) and to who acts in it
// (the console's basic-auth user, the portal's tenant). A forged
// cross-site POST may carry the cookie (SameSite=Strict keeps even that
// out of most browsers) but cannot read it to compute the token, and a
// token lifted from one page fails for another session or principal.
package csrf

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// Field is the form field the token travels in.
const Field = "csrf"

// Token is the token of a session and principal under key.
func Token(key []byte, session, principal string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(session))
	m.Write([]byte{0})
	m.Write([]byte(principal))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Valid reports whether got is the token of session and principal. An
// empty session or token is never valid.
func Valid(key []byte, session, principal, got string) bool {
	return session != "" && got != "" && hmac.Equal([]byte(got), []byte(Token(key, session, principal)))
}
