package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// bornDeliveriesSQL creates deliveries born leased (see
// docs/design/outbox-transport.md, Atomic fan-out): attempts = 1 and
// next_retry_at = now() + birthLeaseWindow, never NULL. The birth lease is
// the claim of the first attempt, which this process makes right after
// commit; the retry worker cannot take the row until the lease expires, so
// the two never POST the same delivery at once. If this process dies first,
// the lease expires and the retry worker delivers.
//
// Deliveries to an endpoint whose attempts are admitted one by one — it has
// a rate limit or an in-flight cap, or its breaker tripped (throttle.go) —
// are born held instead: attempts = 0, due now, unleased. Their first
// attempt is the retry lane's, through the pool-wide admission; a first
// attempt in process would bypass it: once a breaker opens, no first
// attempt goes out to its endpoint from the fan-out. So are those of an
// ordered event that must wait for an earlier one of its key
// (ordering.go), or for an earlier event of its key born in the same
// statement, which the statement's own check cannot see.
//
// One statement serves the fan-out, ReplayEvent and ReplayFailedSince:
// $1 the events; $2 NULL for every enabled endpoint subscribed to each
// event's type, or one endpoint id (a replay to that endpoint, or an event
// addressed to it); $3 the birth lease. ON
// CONFLICT makes a re-run of an interrupted replay create only what is
// missing. It returns what the first attempt needs, with the lease left as
// Postgres measures it, so no clock skew between this host and the
// database can stretch an attempt past the lease.
var bornDeliveriesSQL = `WITH born AS (
	INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at, leased_until, ordering_key, ordering_seq)
	SELECT ev.id, ep.id, CASE WHEN h.held THEN 0 ELSE 1 END, CASE WHEN h.held THEN now() ELSE now() + $3::interval END,
		CASE WHEN h.held THEN NULL ELSE now() + $3::interval END, ev.ordering_key, CASE WHEN ev.ordering_key IS NOT NULL THEN ev.ordering_seq END
	FROM webhook_events ev
	JOIN webhook_endpoints ep ON ep.enabled AND CASE
		WHEN $2::uuid IS NULL THEN cardinality(ep.event_types) = 0 OR ev.event_type = ANY (ep.event_types)
		ELSE ep.id = $2::uuid END
	CROSS JOIN LATERAL (SELECT ` + needsAdmission + `
		OR ` + orderedWaitSQL("ep.id", "ev.ordering_key", "ev.ordering_seq") + `
		OR (ev.ordering_key IS NOT NULL AND EXISTS (SELECT 1 FROM webhook_events before WHERE before.id = ANY ($1::uuid[])
			AND before.ordering_key = ev.ordering_key AND before.ordering_seq < ev.ordering_seq)) AS held) h
	WHERE ev.id = ANY ($1::uuid[])
	ON CONFLICT (event_id, endpoint_id) DO NOTHING
	RETURNING id, event_id, endpoint_id, attempts, next_retry_at
)
SELECT born.id, born.event_id, born.endpoint_id, ep.url, ep.secret, ` + olderSecretsSQL + `,
	ep.send_traceparent, born.attempts, EXTRACT(EPOCH FROM born.next_retry_at - clock_timestamp())::float8
FROM born JOIN webhook_endpoints ep ON ep.id = born.endpoint_id
ORDER BY born.event_id, ep.created_at`

// bornDeliveries runs bornDeliveriesSQL on db (the fan-out's transaction,
// or the pool for a replay: one statement is one transaction). endpointID
// "" means every subscribed endpoint. events maps event id → the event.
func (p *Dispatcher) bornDeliveries(ctx context.Context, db DB, events map[string]event, endpointID string) ([]delivery, error) {
	ids := make([]string, 0, len(events))
	for id := range events {
		ids = append(ids, id)
	}
	var endpoint *string
	if endpointID != "" {
		endpoint = &endpointID
	}
	sent := time.Now()
	rows, err := db.Query(ctx, bornDeliveriesSQL, ids, endpoint, p.lc.BirthLeaseWindow)
	if err != nil {
		return nil, fmt.Errorf("create deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (delivery, error) {
		d := delivery{enabled: true}
		var left *float64
		err := row.Scan(&d.id, &d.eventID, &d.endpointID, &d.url, &d.secret, &d.olderSecrets, &d.sendTraceparent, &d.attempt, &left)
		d.leaseEnd = leaseEnd(sent, left)
		d.leased = d.attempt > 0 // a held delivery waits for the retry lane's admission
		d.event = events[d.eventID]
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("create deliveries: %w", err)
	}
	leased := 0
	for _, d := range ds {
		if d.leased {
			leased++
		}
	}
	p.metrics.engine().Claimed("webhook_deliveries", leased) // birth is the first attempt's claim
	return ds, nil
}

// leaseEnd turns the lease left, as the database measured it, into a local
// deadline. It counts from when the statement was sent, so the local
// deadline falls no later than the database's. No lease (NULL) means the
// row is already claimable: the deadline is now.
func leaseEnd(sent time.Time, secondsLeft *float64) time.Time {
	if secondsLeft == nil {
		return sent
	}
	return sent.Add(time.Duration(*secondsLeft * float64(time.Second)))
}
