package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/claim"
	"github.com/postbox/postbox/internal/pgtext"
	"github.com/postbox/postbox/leases"
)

// DeliveryStatus is webhook_deliveries.status.
type DeliveryStatus string

// Delivery states. Pending is at-least-once (a crash or lease expiry can add
// one duplicate attempt); Succeeded and Failed are terminal.
const (
	StatusPending   DeliveryStatus = "pending"
	StatusSucceeded DeliveryStatus = "succeeded"
	StatusFailed    DeliveryStatus = "failed"
)

// DeliveryMark is the outcome of one attempt, as UpdateDelivery records it.
type DeliveryMark struct {
	// Status is the delivery's new state: Succeeded, Failed, or Pending to
	// retry after RetryIn.
	Status  DeliveryStatus
	RetryIn time.Duration // Pending only: the wait before the next attempt

	// The attempt log row. Attempt is the delivery's attempts count when
	// it was attempted (birth counts as the first claim); zero means no
	// HTTP attempt was made (e.g. the endpoint was disabled) and nothing is
	// logged.
	Attempt    int
	StatusCode int // zero when there was no response
	Duration   time.Duration
	Error      string // empty on success; stored cleaned and capped (pgtext.LastError)
	Excerpt    string // at most 4096 bytes of the response body, cleaned (readExcerpt)

	// Until is the last moment the mark is retried after a connection
	// error: the delivery's lease end. Zero means within MarkTimeout.
	Until time.Time
}

// updateDeliverySQL logs the attempt and applies the mark in one statement.
//
// The attempt row is written whether or not the mark applies: the HTTP
// request happened and the log is the record of what receivers were sent. The
// mark itself is a compare-and-set on status = 'pending' (see
// docs/design/outbox-transport.md, Detached marks): a writer whose lease
// expired and whose delivery a sibling already resolved is dropped, never
// applied — a late failure must not overwrite a sibling's success. attempts
// is not touched: claims count attempts, marks never do. The mark ends the
// lease, so the delivery no longer counts against its endpoint's
// max_in_flight.
//
// A success also counts toward its endpoint's circuit breaker
// (breakerSuccessCTE) when $9 names the endpoint: the database, not the
// process that made the attempt, knows whether the endpoint is being
// watched, so a success counts wherever in the pool it was made, and an
// endpoint nobody watches costs a primary-key probe and no write. The
// statement returns whether that success closed the breaker.
var updateDeliverySQL = `WITH attempt AS (
	INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, error, response_excerpt)
	SELECT $1::uuid, $2::int, NULLIF($3::int, 0), $4::int, NULLIF($5::text, ''), $6::text
	WHERE $2::int > 0
), ` + breakerSuccessCTE(`$9::uuid AND $7 = 'succeeded' AND $2::int > 0`, "$10", "$11") + `
UPDATE webhook_deliveries SET
	status        = $7::text,
	last_error    = NULLIF($5, ''),
	next_retry_at = CASE WHEN $7 = 'pending' THEN now() + $8::interval ELSE next_retry_at END,
	leased_until  = NULL,
	delivered_at  = CASE WHEN $7 = 'succeeded' THEN now() END
WHERE id = $1 AND status = 'pending'
RETURNING coalesce((SELECT closes FROM breaker_success), false)`

// UpdateDelivery records one attempt and applies its mark. It runs on a
// context detached from ctx's cancellation and bounded by
// leases.MarkTimeout: an attempt already made is always recorded, even when
// the batch that made it has been cancelled.
//
// It returns ErrStaleDeliveryMark when the delivery was no longer pending
// (the attempt is still logged). Callers log and count it; none discards it.
func UpdateDelivery(ctx context.Context, db DB, deliveryID string, m DeliveryMark) error {
	_, err := markDelivery(ctx, db, deliveryID, m, nil)
	return err
}

// breakerCount is what a mark needs to count a success toward its
// endpoint's circuit breaker: the endpoint and the Dispatcher's breaker
// settings.
type breakerCount struct {
	endpointID string
	probes     int
	window     time.Duration
}

// markDelivery is UpdateDelivery that, given b, counts a success toward
// b's endpoint breaker in the same statement, and reports whether it
// closed the breaker.
func markDelivery(ctx context.Context, db DB, deliveryID string, m DeliveryMark, b *breakerCount) (closed bool, err error) {
	switch m.Status {
	case StatusPending, StatusSucceeded, StatusFailed:
	default:
		return false, fmt.Errorf("webhook: update delivery %s: unknown status %q", deliveryID, m.Status)
	}
	until := m.Until
	if until.IsZero() {
		until = time.Now().Add(leases.MarkTimeout)
	}
	var (
		endpoint *string
		probes   int
		window   float64
	)
	if b != nil {
		endpoint, probes, window = &b.endpointID, b.probes, b.window.Seconds()
	}
	ambiguous, err := claim.RetryMark(ctx, until, func(ctx context.Context) error {
		err := db.QueryRow(ctx, updateDeliverySQL,
			deliveryID, m.Attempt, m.StatusCode, max(m.Duration.Milliseconds(), 0), pgtext.LastError(m.Error),
			nullIfEmpty(m.Excerpt, m.StatusCode), string(m.Status), m.RetryIn, endpoint, probes, window).Scan(&closed)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w (delivery %s)", ErrStaleDeliveryMark, deliveryID)
		case err != nil:
			return fmt.Errorf("webhook: update delivery %s: %w", deliveryID, err)
		}
		return nil
	})
	if ambiguous && errors.Is(err, ErrStaleDeliveryMark) && m.Status != StatusPending && claim.Landed(ctx, db, deliveriesTable, deliveryID, string(m.Status)) {
		return false, nil // an earlier try committed before its answer was lost
	}
	return closed, err
}

// nullIfEmpty stores NULL for "no response" and an empty string for an empty body.
func nullIfEmpty(excerpt string, statusCode int) *string {
	if excerpt == "" && statusCode == 0 {
		return nil
	}
	return &excerpt
}
