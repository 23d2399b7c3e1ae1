// Package receiver is the receiving end of postbox's webhooks: it verifies
// a delivery's Standard Webhooks signature and timestamp. It imports the
// standard library only, so a receiver's binary does not link pgx, River
// or OpenTelemetry as package webhook does; webhook.Verify is this
// package's Verify.
//
// What a delivery carries — the headers, the {"type","timestamp","data"}
// body, what webhook-id means — is in package webhook's documentation,
// "Receiving", and in docs/OPERATIONS.md, "Receiving webhooks".
package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers, as package webhook sends them.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far a webhook-timestamp may lie from the
// receiver's clock, in either direction, as in the Standard Webhooks
// reference libraries: it bounds how long a captured request can be
// replayed, and tolerates modest clock skew.
const DefaultTolerance = 5 * time.Minute

// Errors Verify wraps, so a receiver can tell a forged or replayed request
// from a malformed one or from its own misconfiguration. None of them
// carries the secret or the expected signature.
var (
	ErrInvalidSecret       = errors.New("webhook: invalid secret")
	ErrMissingHeader       = errors.New("webhook: missing signature header")
	ErrBadTimestamp        = errors.New("webhook: malformed webhook-timestamp")
	ErrTimestampTooOld     = errors.New("webhook: webhook-timestamp too old")
	ErrTimestampTooNew     = errors.New("webhook: webhook-timestamp too new")
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
)

// Secret sizes: Standard Webhooks asks for 24 to 64 random bytes, and
// postbox issues nothing else, so a shorter key is a secret cut short.
const (
	secretPrefix   = "whsec_"
	minSecretBytes = 24
	maxSecretBytes = 64
)

// Verify checks a received webhook the Standard Webhooks way with the
// endpoint's whsec_ secret: the three headers are present, webhook-timestamp
// is within DefaultTolerance of now, and one of the space-separated v1
// signatures is the HMAC-SHA256 of id.timestamp.body. During a secret
// rotation postbox sends one signature per active secret, so a receiver
// holding either secret verifies. body must be the raw bytes received.
func Verify(secret string, header http.Header, body []byte) error {
	return Verifier{Secret: secret}.Verify(header, body)
}

// Verifier is Verify with a chosen tolerance and clock.
type Verifier struct {
	// Secret is the endpoint's whsec_ secret.
	Secret string
	// Tolerance is the accepted skew either way; zero means DefaultTolerance.
	Tolerance time.Duration
	// Now is the receiver's clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Verify checks header and body as the package-level Verify does.
func (v Verifier) Verify(header http.Header, body []byte) error {
	key, err := secretKey(v.Secret)
	if err != nil {
		return err
	}
	if v.Tolerance < 0 {
		return fmt.Errorf("webhook: verify: tolerance %s is negative", v.Tolerance)
	}
	id, ts, sigs := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	for _, h := range []struct{ name, value string }{
		{HeaderID, id}, {HeaderTimestamp, ts}, {HeaderSignature, sigs},
	} {
		if h.value == "" {
			return fmt.Errorf("%w: %s", ErrMissingHeader, h.name)
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrBadTimestamp, ts)
	}
	if err := v.checkTime(time.Unix(secs, 0)); err != nil {
		return err
	}
	want := []byte(sign(key, id, secs, body))
	for s := range strings.SplitSeq(sigs, " ") {
		// Every candidate is compared in constant time; one malformed or
		// unknown-version entry must not stop the search, as a rotation
		// or a future scheme may add entries this receiver cannot read.
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrNoMatchingSignature
}

func (v Verifier) checkTime(sent time.Time) error {
	tol := v.Tolerance
	if tol == 0 {
		tol = DefaultTolerance
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	t := now()
	if t.Sub(sent) > tol {
		return fmt.Errorf("%w: sent %s, tolerance %s", ErrTimestampTooOld, sent.UTC().Format(time.RFC3339), tol)
	}
	if sent.Sub(t) > tol {
		return fmt.Errorf("%w: sent %s, tolerance %s", ErrTimestampTooNew, sent.UTC().Format(time.RFC3339), tol)
	}
	return nil
}

// secretKey decodes a whsec_ secret. Its errors never repeat the secret.
func secretKey(s string) ([]byte, error) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: secret must start with %q", ErrInvalidSecret, secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: secret after %q is not standard base64", ErrInvalidSecret, secretPrefix)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("%w: secret key is %d bytes, must be %d to %d",
			ErrInvalidSecret, len(key), minSecretBytes, maxSecretBytes)
	}
	return key, nil
}

// sign is "v1," and the base64 HMAC-SHA256, keyed by key, of
// id.timestamp.body, the timestamp in decimal Unix seconds as the sender
// signed it (a header spelled "+1700000000" signs as 1700000000, as in
// the reference libraries).
func sign(key []byte, id string, secs int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, secs, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
