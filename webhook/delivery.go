package webhook

import "time"

// DeliveryStatus is webhook_deliveries.status.
type DeliveryStatus string

// Delivery states. Pending is at-least-once (a crash or lease expiry can add
// one duplicate attempt); Succeeded and Failed are terminal.
const (
	StatusPending   DeliveryStatus = "pending"
	StatusSucceeded DeliveryStatus = "succeeded"
	StatusFailed    DeliveryStatus = "failed"
)

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
	UPDATE webhook_deliveries n SET ` + leaseSet("$18") + `
	WHERE n.id = (
		SELECT next.id FROM marked m
		JOIN webhook_endpoints ep ON ep.id = m.endpoint_id AND ep.enabled AND NOT ` + limitedOrTripped + `
		CROSS JOIN LATERAL (` + nextOfKeySQL("m", "ahead.id = m.id OR ahead.id = ANY ($19::uuid[]) AND ahead.leased_until > clock_timestamp()") + `) next
		WHERE $18::interval > interval '0' AND $7 = 'succeeded')
	RETURNING n.id, n.attempts, EXTRACT(EPOCH FROM n.next_retry_at - clock_timestamp())::float8 AS left,
		n.event_id, n.endpoint_id, n.ordering_key, n.ordering_seq
), handed_after AS (
	UPDATE webhook_deliveries n SET ` + leaseSet("$18") + `
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
