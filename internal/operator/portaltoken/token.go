// Package portaltoken signs and opens the tenant portal's tokens: the
// links an application mints for one tenant (package portal) and the
// session cookies the portal sets when a link is exchanged
// (internal/operator/portalsite).
//
// A token is "v1.<claims>.<mac>": the claims as base64url JSON, and an
// HMAC-SHA256 of the purpose and the encoded claims under a signing key.
// The purpose keeps one kind of token from passing for the other: a
// session cookie pasted as a link fails, and so does the reverse.
package portaltoken

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Purposes of the two kinds of token.
const (
	PurposeLink    = "postbox portal link v1"
	PurposeSession = "postbox portal session v1"
)

// MinKeyBytes is the shortest signing key accepted: 32 bytes, as
// `openssl rand -base64 32` prints (44 characters).
const MinKeyBytes = 32

// Claims are what a token says.
type Claims struct {
	Tenant  string `json:"t"`
	Nonce   string `json:"n"` // random: a link's is spent by its exchange; a session's names the session
	Expires int64  `json:"e"` // Unix seconds
}

// ExpiresAt is Expires as a time.
func (c Claims) ExpiresAt() time.Time { return time.Unix(c.Expires, 0) }

// Errors Open returns; the portal says which in plain words, nothing more.
var (
	ErrInvalid = errors.New("the token is not valid: malformed, altered, or signed with a key this portal does not hold")
	ErrExpired = errors.New("the token has expired")
)

// NewNonce is 16 random bytes, base64url.
func NewNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Sign makes a token of c for purpose under key.
func Sign(key []byte, purpose string, c Claims) (string, error) {
	if len(key) < MinKeyBytes {
		return "", fmt.Errorf("portal: the signing key is %d bytes; want at least %d", len(key), MinKeyBytes)
	}
	body, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	claims := base64.RawURLEncoding.EncodeToString(body)
	return "v1." + claims + "." + mac(key, purpose, claims), nil
}

func mac(key []byte, purpose, claims string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(claims))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Open checks token for purpose against each of keys and returns its
// claims if one signed it and it has not expired at now.
func Open(keys [][]byte, purpose, token string, now time.Time) (Claims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return Claims{}, ErrInvalid
	}
	signed := false
	for _, k := range keys {
		if len(k) >= MinKeyBytes && hmac.Equal([]byte(parts[2]), []byte(mac(k, purpose, parts[1]))) {
			signed = true
			break
		}
	}
	if !signed {
		return Claims{}, ErrInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return Claims{}, ErrInvalid
	}
	var c Claims
	if err := json.Unmarshal(body, &c); err != nil || c.Tenant == "" || !utf8.ValidString(c.Tenant) || c.Nonce == "" {
		return Claims{}, ErrInvalid
	}
	if !now.Before(c.ExpiresAt()) {
		return Claims{}, ErrExpired
	}
	return c, nil
}

// ParseKeys reads a list of signing keys, newest first, separated by
// commas (PORTAL_SIGNING_KEY's value): the first signs, the others still
// open links during a rotation's overlap. Each is used as its bytes, at
// least MinKeyBytes of them.
func ParseKeys(s string) ([][]byte, error) {
	var keys [][]byte
	for i, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if len(k) < MinKeyBytes {
			return nil, fmt.Errorf("key %d of %d is %d bytes; want at least %d (openssl rand -base64 32 prints one)",
				i+1, len(strings.Split(s, ",")), len(k), MinKeyBytes)
		}
		keys = append(keys, []byte(k))
	}
	return keys, nil
}

// Derive is a key for another use (the portal's CSRF tokens) derived from
// a signing key, so one configured secret serves both and rotates both.
func Derive(key []byte, use string) string {
	return mac(key, "postbox portal derived key v1", use)
}
