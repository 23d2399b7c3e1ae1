package webhook

import (
	"errors"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Sentinel errors callers branch on.
var (
	// ErrStaleMark is returned by Mark when the delivery
	// was no longer pending: a sibling (a retry after lease expiry, an
	// operator) already resolved it. The mark is dropped, not applied (see
	// docs/design/outbox-transport.md, Detached marks). Callers log it and
	// count it; none discards it.
	ErrStaleMark error = &staleMarkError{"webhook: stale delivery mark: delivery no longer pending"}

	// ErrStaleOutboxMark is returned by DispatchFromOutbox when the outbox
	// row was no longer pending: another dispatcher already fanned it out.
	// Its transaction was rolled back, so no second event exists.
	ErrStaleOutboxMark error = &staleMarkError{"webhook: stale outbox mark: outbox row no longer pending"}

	// ErrInvalidPayload is returned by Enqueue for a payload that is not
	// valid JSON.
	ErrInvalidPayload = errors.New("webhook: payload is not valid JSON")

	// ErrInvalidEvent is returned by EnqueueEvent for an idempotency key
	// over MaxIdempotencyKeyBytes.
	ErrInvalidEvent = errors.New("webhook: invalid event")

	// ErrPayloadTooLarge is returned by Enqueue for a payload over
	// Settings.MaxPayloadBytes; the error names the limit.
	ErrPayloadTooLarge = errors.New("webhook: payload too large")

	// ErrInvalidEndpoint is returned for an endpoint URL, secret or event
	// type filter that cannot be used.
	ErrInvalidEndpoint = errors.New("webhook: invalid endpoint")

	// ErrNotFound is returned when an endpoint or event id names no row.
	ErrNotFound = errors.New("webhook: not found")

	// ErrForbiddenAddress is wrapped by every SSRF refusal (see
	// AddressError). A refusal is permanent: the delivery fails at once.
	ErrForbiddenAddress = errors.New("webhook: forbidden address")

	// ErrNotCancellable is matched (errors.Is) by Cancel's refusal of a row
	// that is not pending.
	ErrNotCancellable = errors.New("webhook: only a pending webhook_outbox row can be cancelled")

	// ErrBadSince is matched (errors.Is) when ParseSince cannot read its input.
	ErrBadSince = errors.New("bad since")
)

// errUserinfo refuses a request whose URL carries userinfo.
var errUserinfo = errors.New("webhook: refusing to send a request whose url carries credentials")

// staleMarkError is the stale-mark family of both outboxes: each sentinel
// is itself, and errors.Is(err, claim.ErrStale) too, as outbox.ErrStaleMark
// is.
type staleMarkError struct{ msg string }

func (e *staleMarkError) Error() string        { return e.msg }
func (e *staleMarkError) Is(target error) bool { return target == claim.ErrStale }
