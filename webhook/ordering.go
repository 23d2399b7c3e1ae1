package webhook

import (
	"context"
	"fmt"
)

// Ordered delivery (see docs/design/outbox-transport.md, Ordered delivery):
// an event with an ordering key goes to each endpoint after every earlier
// event of the same key, earlier meaning a lower ordering_seq, the place
// its outbox row took when it was inserted. The rule is decided in the
// database, by every statement that lets an attempt start — the retry
// claim and the fan-out's born-leased first attempts — so it holds across
// replicas, crashes and expired leases: nothing in memory orders anything.
//
// A delivery of endpoint E and key K at place S waits while
//
//   - an earlier delivery of E and K is pending: waiting for its first
//     attempt, leased to one, or waiting for a retry;
//   - an earlier delivery of E and K failed for good and E's
//     order_on_failure is 'block', until it is requeued or skipped
//     (order_skipped_at);
//   - an earlier webhook_outbox row of K waits to be fanned out: it may
//     have a delivery for E once it is. A row scheduled for later
//     (SendAt) joins the order when it comes due, so a reminder scheduled
//     for tomorrow does not hold today's events back.
//
// When a delivery stops holding its key, migration 00023's trigger makes
// the next one due at once and wakes the retry lanes.

// orderedWaitSQL is the SQL test that a delivery must wait for an earlier
// one of its endpoint and key. Its three arguments are SQL expressions:
// the delivery's endpoint id, its ordering key and its place.
func orderedWaitSQL(endpoint, key, seq string) string {
	return fmt.Sprintf(`(%[2]s IS NOT NULL AND (EXISTS (
	SELECT 1 FROM webhook_deliveries ahead
	WHERE ahead.endpoint_id = %[1]s AND ahead.ordering_key = %[2]s AND ahead.ordering_seq < %[3]s
		AND ahead.status <> 'succeeded'
		AND (ahead.status = 'pending' OR (ahead.order_skipped_at IS NULL
			AND (SELECT o.order_on_failure FROM webhook_endpoints o WHERE o.id = ahead.endpoint_id) = 'block')))
	OR EXISTS (
	SELECT 1 FROM webhook_outbox ob
	WHERE ob.ordering_key = %[2]s AND ob.status = 'pending' AND ob.ordering_seq < %[3]s
		AND (ob.attempts > 0 OR ob.next_attempt_at <= now()))))`, endpoint, key, seq)
}

// deliveryWaitsSQL is orderedWaitSQL for a webhook_deliveries row named
// by alias.
func deliveryWaitsSQL(alias string) string {
	return orderedWaitSQL(alias+".endpoint_id", alias+".ordering_key", alias+".ordering_seq")
}

// skipOrderedHeadSQL lets a key go on past its failed delivery $1.
const skipOrderedHeadSQL = `UPDATE webhook_deliveries SET order_skipped_at = now()
WHERE id = $1 AND status = 'failed' AND ordering_key IS NOT NULL`

// SkipOrderedHead lets the rest of a key go on past delivery id, which
// failed for good and, under its endpoint's 'block' policy, holds the
// later deliveries of its key (see docs/design/outbox-transport.md,
// Ordered delivery): they go out in order from the next one on, and id
// stays failed, to be requeued or replayed if it is wanted after all. A
// delivery that is not failed, or has no ordering key, is refused with
// the reason; an unknown id gives ErrNotFound.
func SkipOrderedHead(ctx context.Context, db DB, id string) error {
	return updateFailed(ctx, db, id, skipOrderedHeadSQL, "webhook_deliveries", "delivery %s",
		func(status string) error {
			if status == string(StatusFailed) {
				return fmt.Errorf("webhook: delivery %s has no ordering key: nothing waits for it", id)
			}
			return fmt.Errorf("webhook: delivery %s is %s: only a failed delivery holds its key back", id, status)
		})
}
