package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/pgtext"
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

// Outcome is what a mark records about one attempt at a delivery, as
// outbox.Outcome is for an email.
type Outcome string

const (
	OutcomeSucceeded Outcome = "succeeded" // status succeeded
	OutcomeFailed    Outcome = "failed"    // permanent error, attempts spent or endpoint unusable; waits for a requeue
	OutcomeRetry     Outcome = "retry"     // transient error; stays pending until RetryIn has passed
)

// status is the delivery state the outcome leaves; "" for an unknown one.
func (o Outcome) status() DeliveryStatus {
	switch o {
	case OutcomeSucceeded:
		return StatusSucceeded
	case OutcomeFailed:
		return StatusFailed
	case OutcomeRetry:
		return StatusPending
	}
	return ""
}

// DeliveryMark is what UpdateDelivery records of one attempt.
type DeliveryMark struct {
	Outcome Outcome
	RetryIn time.Duration // OutcomeRetry only: the wait before the next attempt

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
// The statement always returns one row: whether the mark applied, what it
// did to the breaker, then the delivery it handed the key on to as the
// attempt needs it (loadColumns, read in the same statement: one round
// trip per event of a hot key, not two), NULL when it handed nothing on.
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
	RETURNING id, endpoint_id, ordering_key, ordering_seq
), ` + handOnCTE + `
SELECT EXISTS (SELECT 1 FROM marked), coalesce((SELECT closes FROM breaker_success), false),
	coalesce(f.trips, false), coalesce(f.requests, 0), coalesce(f.failures, 0), f.paused_until, coalesce(f.expire, false),
	d.attempts, d.left, ` + loadColumns + `, d2.id::text, d2.attempts, d2.left
FROM (SELECT 1) one LEFT JOIN breaker_failure f ON true LEFT JOIN handed d ON true LEFT JOIN handed_after d2 ON true
LEFT JOIN webhook_events e ON e.id = d.event_id LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id`

// handOnCTE, when $18 (a lease) is above zero and the mark delivered an
// ordered delivery, claims the next delivery of its endpoint and key under
// that lease, in the mark's own statement, if it may go now: the earliest
// still pending, due, waiting for nothing but what the attempt holds
// itself — the delivery just marked (the statement's snapshot still sees
// it pending) and the deliveries $19 it leased ahead and has not sent yet,
// while their leases last — to an enabled endpoint that needs no
// admission (the success being marked proves an unproven one:
// limitedOrTripped). The attempt that made the mark sends it in its own slot, as
// soon as the delivery before it was accepted: a hot key goes at its
// receiver's pace, one round trip per event, its marks committing while
// the next request is out (attemptUnit.Run). With nothing leased ahead
// ($19 empty), the mark claims one more behind the next (handed_after),
// so that the key's next request never waits for a mark to commit. The
// trigger of migration 00023 then finds the next deliveries leased and
// leaves them alone (no wake-up, no retry-lane claim for them). The next
// is found through the key's ordering index, whose predicate the
// statement spells out; its due time is read through coalesce, which
// implies nothing of the claim index's predicate, so that no plan walks
// the claim index's entries instead (under a held snapshot, every dead one
// of them).
var handOnCTE = `handed AS (
	UPDATE webhook_deliveries n SET attempts = n.attempts + 1,
		next_retry_at = clock_timestamp() + $18::interval, leased_until = clock_timestamp() + $18::interval
	WHERE n.id = (
		SELECT next.id FROM marked m
		JOIN webhook_endpoints ep ON ep.id = m.endpoint_id AND ep.enabled AND NOT ` + limitedOrTripped + `
		CROSS JOIN LATERAL (` + nextOfKeySQL("m", "ahead.id = m.id OR ahead.id = ANY ($19::uuid[]) AND ahead.leased_until > clock_timestamp()") + `) next
		WHERE $18::interval > interval '0' AND $7 = 'succeeded')
	RETURNING n.id, n.attempts, EXTRACT(EPOCH FROM n.next_retry_at - clock_timestamp())::float8 AS left,
		n.event_id, n.endpoint_id, n.ordering_key, n.ordering_seq
), handed_after AS (
	UPDATE webhook_deliveries n SET attempts = n.attempts + 1,
		next_retry_at = clock_timestamp() + $18::interval, leased_until = clock_timestamp() + $18::interval
	WHERE n.id = (
		SELECT next.id FROM marked m CROSS JOIN handed h
		CROSS JOIN LATERAL (` + nextOfKeySQL("h", "ahead.id = m.id OR ahead.id = h.id") + `) next
		WHERE coalesce(cardinality($19::uuid[]), 0) = 0)
	RETURNING n.id, n.attempts, EXTRACT(EPOCH FROM n.next_retry_at - clock_timestamp())::float8 AS left
)`

// nextOfKeySQL is the earliest delivery of the key of the delivery named
// by alias after it, pending, due and waiting for nothing but the
// earlier deliveries for which the SQL condition ours holds
// (waitsBehindSQL), locked for its claim.
func nextOfKeySQL(alias, ours string) string {
	return `SELECT d.id FROM webhook_deliveries d
			WHERE d.endpoint_id = ` + alias + `.endpoint_id AND d.ordering_key = ` + alias + `.ordering_key AND d.ordering_seq > ` + alias + `.ordering_seq
				AND d.ordering_key IS NOT NULL AND d.status <> 'succeeded' AND d.status = 'pending'
				AND coalesce(d.next_retry_at, now()) <= now()
				AND NOT ` + waitsBehindSQL("d.endpoint_id", "d.ordering_key", "d.ordering_seq", ours) + `
			ORDER BY d.ordering_seq
			LIMIT 1
			FOR UPDATE SKIP LOCKED`
}

// handedOn is the delivery a mark claimed to hand its key on to.
type handedOn struct {
	id      string
	attempt int
	left    *float64  // its lease, as Postgres measured it (leaseEnd)
	sent    time.Time // when the mark was sent
	d       delivery  // what its attempt needs, but the lease
	loaded  bool      // d was read; if not, loadHanded reads it
}

// markBreakerParams are updateDeliverySQL's breaker parameters.
var markBreakerParams = breakerParams{probes: "$10", window: "$11", minRequests: "$13", rate: "$14",
	cooldown: "$15", maxCooldown: "$16", disableAfter: "$17", unprovenCap: "$20"}

// UpdateDelivery records one attempt and applies its mark. It runs on a
// context detached from ctx's cancellation and bounded by
// leases.MarkTimeout: an attempt already made is always recorded, even when
// the batch that made it has been cancelled.
//
// It returns ErrStaleDeliveryMark when the delivery was no longer pending
// (the attempt is still logged). Callers log and count it; none discards it.
func UpdateDelivery(ctx context.Context, db DB, deliveryID string, m DeliveryMark) error {
	_, _, err := markDelivery(ctx, db, nil, deliveryID, m, nil)
	return err
}

// breakerCount is what a Dispatcher's mark does beside the CAS: count the
// attempt toward the endpoint's circuit breaker (the endpoint, whether the
// attempt counts, the Dispatcher's breaker settings) and, given a lease,
// hand an ordered key on (handOnCTE) past the deliveries the attempt
// leased ahead (ahead, their ids).
type breakerCount struct {
	endpointID string
	counts     bool
	settings   Settings
	handOn     time.Duration
	ahead      []string
}

// markDelivery is UpdateDelivery through group (the Dispatcher's group
// commit; nil: a statement of its own on db) that, given b, counts the
// attempt toward b's endpoint breaker in the same statement and says what
// that did, and hands an ordered key on (next: the deliveries it claimed,
// in their order; none when it handed nothing on).
func markDelivery(ctx context.Context, db DB, group *claim.Group, deliveryID string, m DeliveryMark, b *breakerCount) (out breakerOutcome, next []handedOn, err error) {
	status := m.Outcome.status()
	if status == "" {
		return out, nil, fmt.Errorf("webhook: update delivery %s: unknown outcome %q", deliveryID, m.Outcome)
	}
	until := m.Until
	if until.IsZero() {
		until = time.Now().Add(leases.MarkTimeout)
	}
	var (
		endpoint *string
		counts   bool
		s        = Settings{}.withDefaults()
		handOn   time.Duration
		ahead    = []string{}
	)
	if b != nil {
		endpoint, counts, s, handOn = &b.endpointID, b.counts && m.Attempt > 0, b.settings, b.handOn
		if b.ahead != nil {
			ahead = b.ahead
		}
	}
	ambiguous, err := claim.RetryMark(ctx, until, func(ctx context.Context) error {
		gm := &claim.Mark{ID: deliveryID, SQL: updateDeliverySQL,
			Args: []any{deliveryID, m.Attempt, m.StatusCode, max(m.Duration.Milliseconds(), 0), pgtext.LastError(m.Error),
				nullIfEmpty(m.Excerpt, m.StatusCode), string(status), m.RetryIn, endpoint,
				s.BreakerProbes, s.BreakerWindow.Seconds(), counts, s.BreakerMinRequests, s.BreakerFailureRate,
				s.BreakerCooldown.Seconds(), s.BreakerMaxCooldown.Seconds(), s.DisableAfter, handOn, ahead, s.Concurrency},
			Result: func(row pgx.Row) error {
				var (
					marked   bool
					h, after handedOn
					n, n2    *int
					id2      *string
					l        loaded
				)
				out, next = breakerOutcome{}, nil
				err := row.Scan(append(append([]any{&marked, &out.closed, &out.opened, &out.requests, &out.failures, &out.pausedUntil, &out.expire,
					&n, &h.left}, l.targets()...), &id2, &n2, &after.left)...)
				if err == nil && l.id != nil {
					// A delivery whose columns do not make an attempt is
					// loaded again (loadHanded), which releases it if
					// it still cannot: the mark itself stands.
					var derr error
					h.d, derr = l.delivery(map[string]event{})
					h.id, h.attempt, h.loaded = *l.id, *n, derr == nil
					next = append(next, h)
				}
				if err == nil && id2 != nil {
					// Read when its turn comes (loadHanded), while the
					// one before it is out.
					after.id, after.attempt = *id2, *n2
					next = append(next, after)
				}
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
	if ambiguous && errors.Is(err, ErrStaleDeliveryMark) && m.Outcome != OutcomeRetry && claim.Landed(ctx, db, deliveriesTable, deliveryID, string(status)) {
		// An earlier try committed before its answer was lost; a delivery
		// it handed the key on to waits out its lease for the retry lane.
		return out, nil, nil
	}
	return out, next, err
}

// nullIfEmpty stores NULL for "no response" and an empty string for an empty body.
func nullIfEmpty(excerpt string, statusCode int) *string {
	if excerpt == "" && statusCode == 0 {
		return nil
	}
	return &excerpt
}
