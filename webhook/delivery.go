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
// When $9 names the endpoint, the attempt's outcome is counted toward its
// circuit breaker in the same statement ($12: the attempt counts for the
// breaker — a request was made and it did not answer 410 Gone): a success
// (breakerSuccessCTE) or a failure (breakerFailureCTE). Counted at the
// mark, in the order marks commit, the window sees a success made on any
// replica, after the failures before it and before those after it; and an
// endpoint nobody watches costs a primary-key probe and no write.
//
// The statement always returns one row: whether the mark applied, then
// what it did to the breaker.
var updateDeliverySQL = `WITH attempt AS (
	INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, error, response_excerpt)
	SELECT $1::uuid, $2::int, NULLIF($3::int, 0), $4::int, NULLIF($5::text, ''), $6::text
	WHERE $2::int > 0
), ` + breakerSuccessCTE(`$9::uuid AND $12::bool AND $7 = 'succeeded'`, markBreakerParams) + `,
` + breakerFailureCTE(`$9::uuid AND $12::bool AND $7 <> 'succeeded'`, markBreakerParams) + `,
marked AS (
	UPDATE webhook_deliveries SET
		status        = $7::text,
		last_error    = NULLIF($5, ''),
		next_retry_at = CASE WHEN $7 = 'pending' THEN now() + $8::interval ELSE next_retry_at END,
		leased_until  = NULL,
		delivered_at  = CASE WHEN $7 = 'succeeded' THEN now() END
	WHERE id = $1 AND status = 'pending'
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM marked), coalesce((SELECT closes FROM breaker_success), false),
	coalesce(f.trips, false), coalesce(f.requests, 0), coalesce(f.failures, 0), f.paused_until, coalesce(f.expire, false)
FROM (SELECT 1) one LEFT JOIN breaker_failure f ON true`

// markBreakerParams are updateDeliverySQL's breaker parameters.
var markBreakerParams = breakerParams{probes: "$10", window: "$11", minRequests: "$13", rate: "$14",
	cooldown: "$15", maxCooldown: "$16", disableAfter: "$17"}

// UpdateDelivery records one attempt and applies its mark. It runs on a
// context detached from ctx's cancellation and bounded by
// leases.MarkTimeout: an attempt already made is always recorded, even when
// the batch that made it has been cancelled.
//
// It returns ErrStaleDeliveryMark when the delivery was no longer pending
// (the attempt is still logged). Callers log and count it; none discards it.
func UpdateDelivery(ctx context.Context, db DB, deliveryID string, m DeliveryMark) error {
	_, err := markDelivery(ctx, db, nil, deliveryID, m, nil)
	return err
}

// breakerCount is what a mark needs to count its attempt toward the
// endpoint's circuit breaker: the endpoint, whether the attempt counts,
// and the Dispatcher's breaker settings.
type breakerCount struct {
	endpointID string
	counts     bool
	settings   Settings
}

// markDelivery is UpdateDelivery through group (the Dispatcher's group
// commit; nil: a statement of its own on db) that, given b, counts the
// attempt toward b's endpoint breaker in the same statement and says what
// that did.
func markDelivery(ctx context.Context, db DB, group *claim.Group, deliveryID string, m DeliveryMark, b *breakerCount) (out breakerOutcome, err error) {
	switch m.Status {
	case StatusPending, StatusSucceeded, StatusFailed:
	default:
		return out, fmt.Errorf("webhook: update delivery %s: unknown status %q", deliveryID, m.Status)
	}
	until := m.Until
	if until.IsZero() {
		until = time.Now().Add(leases.MarkTimeout)
	}
	var (
		endpoint *string
		counts   bool
		s        = Settings{}.withDefaults()
	)
	if b != nil {
		endpoint, counts, s = &b.endpointID, b.counts && m.Attempt > 0, b.settings
	}
	ambiguous, err := claim.RetryMark(ctx, until, func(ctx context.Context) error {
		gm := &claim.Mark{ID: deliveryID, SQL: updateDeliverySQL,
			Args: []any{deliveryID, m.Attempt, m.StatusCode, max(m.Duration.Milliseconds(), 0), pgtext.LastError(m.Error),
				nullIfEmpty(m.Excerpt, m.StatusCode), string(m.Status), m.RetryIn, endpoint,
				s.BreakerProbes, s.BreakerWindow.Seconds(), counts, s.BreakerMinRequests, s.BreakerFailureRate,
				s.BreakerCooldown.Seconds(), s.BreakerMaxCooldown.Seconds(), s.DisableAfter},
			Result: func(row pgx.Row) error {
				var marked bool
				out = breakerOutcome{}
				err := row.Scan(&marked, &out.closed, &out.opened, &out.requests, &out.failures, &out.pausedUntil, &out.expire)
				if err == nil && !marked {
					return fmt.Errorf("%w (delivery %s)", ErrStaleDeliveryMark, deliveryID)
				}
				return err
			},
			Wrap: func(err error) error { return fmt.Errorf("webhook: update delivery %s: %w", deliveryID, err) },
		}
		if group != nil {
			return group.Run(ctx, gm)
		}
		return claim.RunAlone(ctx, db, gm)
	})
	if ambiguous && errors.Is(err, ErrStaleDeliveryMark) && m.Status != StatusPending && claim.Landed(ctx, db, deliveriesTable, deliveryID, string(m.Status)) {
		return out, nil // an earlier try committed before its answer was lost
	}
	return out, err
}

// nullIfEmpty stores NULL for "no response" and an empty string for an empty body.
func nullIfEmpty(excerpt string, statusCode int) *string {
	if excerpt == "" && statusCode == 0 {
		return nil
	}
	return &excerpt
}
