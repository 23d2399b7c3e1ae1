package webhook

import (
	"net/http"

	// Aliased: the package's tests have a receiver of their own.
	recv "github.com/postbox/postbox/webhook/receiver"
)

// The receiving end lives in package webhook/receiver, which imports the
// standard library only: a receiver that imports it instead of this
// package does not link pgx, River or OpenTelemetry. The names here are
// the same values, so errors.Is works with either.

// DefaultTolerance is how far a webhook-timestamp may lie from the
// receiver's clock, in either direction (receiver.DefaultTolerance).
const DefaultTolerance = recv.DefaultTolerance

// Errors Verify wraps (receiver's, re-exported). None of them carries the
// secret or the expected signature.
var (
	ErrInvalidSecret       = recv.ErrInvalidSecret
	ErrMissingHeader       = recv.ErrMissingHeader
	ErrBadTimestamp        = recv.ErrBadTimestamp
	ErrTimestampTooOld     = recv.ErrTimestampTooOld
	ErrTimestampTooNew     = recv.ErrTimestampTooNew
	ErrNoMatchingSignature = recv.ErrNoMatchingSignature
)

// Verifier is Verify with a chosen tolerance and clock (receiver.Verifier).
type Verifier = recv.Verifier

// Verify checks a received webhook the Standard Webhooks way with the
// endpoint's whsec_ secret: the three headers are present, webhook-timestamp
// is within DefaultTolerance of now, and one of the space-separated v1
// signatures is the HMAC-SHA256 of id.timestamp.body. During a secret
// rotation postbox sends one signature per active secret, so a receiver
// holding either secret verifies. body must be the raw bytes received.
// It is receiver.Verify.
func Verify(secret string, header http.Header, body []byte) error {
	return recv.Verify(secret, header, body)
}
