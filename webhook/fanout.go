package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbox/postbox/internal/engine"
	"go.opentelemetry.io/otel/trace"
)

// bornSQL is the CTEs, named born last, that create the deliveries of the
// events in the relation events (columns id, event_type, tenant_id,
// ordering_key, ordering_seq, and target: NULL for every enabled endpoint subscribed to
// the event's type, or one endpoint's id — a replay to that endpoint, or an
// event addressed to it), under the birth lease in the SQL parameter
// lease. born returns the deliveries' id, event_id, endpoint_id, attempts
// and next_retry_at. The fan-out (fanOutSQL) and the replays
// (replayBornSQL) both make their deliveries here.
//
// Deliveries are born leased (see docs/design/outbox-transport.md, Atomic
// fan-out): attempts = 1 and next_retry_at = now() + the birth lease,
// never NULL. The birth lease is the claim of the first attempt, which
// this process makes right after commit; the retry worker cannot take the
// row until the lease expires, so the two never POST the same delivery at
// once. If this process dies first, the lease expires and the retry worker
// delivers.
//
// Deliveries to an endpoint whose attempts are admitted one by one — it has
// a rate limit or an in-flight cap, or its breaker tripped (throttle.go) —
// are born held instead: attempts = 0, due now, unleased. Their first
// attempt is the retry lane's, through the pool-wide admission; a first
// attempt in process would bypass it: once a breaker opens, no first
// attempt goes out to its endpoint from the fan-out. So are those of an
// ordered event that must wait for an earlier one of its key
// (ordering.go), or for an earlier event of its key born in the same
// statement, which the statement's own snapshot cannot see.
//
// An endpoint that has never accepted a delivery (proven_at NULL) gets
// deliveries born leased only up to the SQL parameter unproven
// (Settings.Concurrency) pool-wide, counted on its row
// (unproven_births): the statement locks such endpoints' rows in id
// order, reads their latest count — a locking read waits for another
// fan-out's commit and reads its count — and adds its own. Past the cap
// they are born held, for the admission, which holds first attempts while
// that many are attempted and unresolved. So a new endpoint that answers
// every request with a 500 gets at most that many first attempts before
// its breaker opens, however many replicas fan out to it at once, while a
// healthy one proves itself with its first answer.
//
// ON CONFLICT makes a re-run of an interrupted replay create only what is
// missing.
func bornSQL(events, lease, unproven string) string {
	return `pairs AS (
	SELECT ev.id AS event_id, ep.id AS endpoint_id, ev.ordering_key, ev.ordering_seq, ep.proven_at IS NULL AS unproven, h.held,
		row_number() OVER (PARTITION BY ep.id, h.held ORDER BY ev.ordering_seq, ev.id) AS k
	FROM ` + events + ` ev
	JOIN webhook_endpoints ep ON ` + reachesSQL + `
	CROSS JOIN LATERAL (SELECT ` + limitedOrTripped + `
		OR ` + orderedWaitSQL("ep.id", "ev.ordering_key", "ev.ordering_seq") + `
		OR (ev.ordering_key IS NOT NULL AND EXISTS (SELECT 1 FROM ` + events + ` before
			WHERE before.ordering_key = ev.ordering_key AND before.ordering_seq < ev.ordering_seq)) AS held) h
), unproven_budget AS (
	SELECT id, unproven_births FROM webhook_endpoints
	WHERE proven_at IS NULL AND id IN (SELECT endpoint_id FROM pairs WHERE unproven AND NOT held)
	ORDER BY id
	FOR NO KEY UPDATE
), unproven_spent AS (
	UPDATE webhook_endpoints ep SET unproven_births = least(b.unproven_births + w.n, 1000000000)
	FROM unproven_budget b
	JOIN (SELECT endpoint_id, count(*) AS n FROM pairs WHERE unproven AND NOT held GROUP BY endpoint_id) w ON w.endpoint_id = b.id
	WHERE ep.id = b.id
	RETURNING ep.id, b.unproven_births AS before
), born AS (
	INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at, leased_until, ordering_key, ordering_seq)
	SELECT p.event_id, p.endpoint_id, CASE WHEN p.held THEN 0 ELSE 1 END, CASE WHEN p.held THEN now() ELSE now() + ` + lease + `::interval END,
		CASE WHEN p.held THEN NULL ELSE now() + ` + lease + `::interval END, p.ordering_key, CASE WHEN p.ordering_key IS NOT NULL THEN p.ordering_seq END
	FROM (SELECT pairs.event_id, pairs.endpoint_id, pairs.ordering_key, pairs.ordering_seq,
			pairs.held OR (s.id IS NOT NULL AND pairs.k > greatest(` + unproven + `::int - s.before, 0)) AS held
		FROM pairs LEFT JOIN unproven_spent s ON s.id = pairs.endpoint_id) p
	ON CONFLICT (event_id, endpoint_id) DO NOTHING
	RETURNING id, event_id, endpoint_id, attempts, next_retry_at, ordering_key, ordering_seq
)`
}

// reachesSQL is whether endpoint ep gets a delivery of event ev, whose
// target is NULL for every enabled endpoint subscribed to its type, or
// the one endpoint it goes to: the rule every birth follows (bornSQL), and
// the one ReplayTargets lists a replay's endpoints by. Either way the
// endpoint is the event's tenant's (sameTenantSQL): an event of no tenant
// reaches only endpoints of none.
const reachesSQL = sameTenantSQL + ` AND ep.enabled AND CASE
		WHEN ev.target IS NULL THEN cardinality(ep.event_types) = 0 OR ev.event_type = ANY (ep.event_types)
		ELSE ep.id = ev.target END`

// addressedSQL is the endpoint event e was addressed to, NULL for an event
// fanned out to every subscribed endpoint: what the fan-out copied from
// its webhook_outbox row (migration 00029), or, for an event a binary
// before it fanned out, the row's own while the row is kept. A replay goes
// where its original went.
func addressedSQL(e string) string {
	return `coalesce(` + e + `.endpoint_id, (SELECT a.endpoint_id FROM webhook_outbox a WHERE a.id = ` + e + `.outbox_id))`
}

// bornColumns is what a first attempt needs of a born delivery (alias
// born) and its endpoint (ep), with the lease left as Postgres measures
// it, so no clock skew between this host and the database can stretch an
// attempt past the lease (see leaseEnd); then whether it was born held
// for its key's order alone (waits), and whether that birth may have
// raced the mark of an earlier delivery it waits for (raced).
//
// A birth races a mark when each statement's snapshot misses the other's
// commit: the birth sees the earlier delivery pending and is born held,
// while the mark's hand-on (handOnCTE) and migration 00023's trigger never
// see the birth, and nothing would hand the key on until the sweep,
// seconds later. The version of the earlier delivery the birth saw then
// carries the mark's transaction id in its xmax, which no lock has to be
// taken to read: raced is that test, a superset (a row lock or an aborted
// update sets xmax too) that takeRaced settles after the birth commits.
const bornColumns = `born.id::text, born.event_id::text, born.endpoint_id::text, ep.url, ep.secret, ` + olderSecretsSQL + `,
	ep.send_traceparent, born.attempts, EXTRACT(EPOCH FROM born.next_retry_at - clock_timestamp())::float8, born.ordering_key, born.ordering_seq,
	born.attempts = 0 AND NOT ` + needsAdmission + `,
	born.attempts = 0 AND NOT ` + needsAdmission + ` AND EXISTS (SELECT 1 FROM webhook_deliveries ahead
		WHERE ahead.endpoint_id = born.endpoint_id AND ahead.ordering_key = born.ordering_key
			AND ahead.ordering_seq < born.ordering_seq AND ahead.status <> 'succeeded' AND ahead.xmax <> 0)`

// scanBorn reads bornColumns, after the columns in before, into a
// delivery whose statement was sent at sent; the caller sets its event. ok
// is false when the columns are NULL: a fanned-out event no endpoint
// subscribed to.
func scanBorn(row pgx.Row, sent time.Time, before ...any) (d delivery, ok bool, err error) {
	var (
		id, eventID, endpointID, url, secret *string
		sendTraceparent                      *bool
		attempt                              *int
		left                                 *float64
		orderingKey                          *string
		orderingSeq                          *int64
		waits, raced                         *bool
	)
	err = row.Scan(append(before, &id, &eventID, &endpointID, &url, &secret, &d.olderSecrets, &sendTraceparent, &attempt, &left, &orderingKey, &orderingSeq, &waits, &raced)...)
	if err != nil || id == nil {
		return d, false, err
	}
	d.id, d.eventID, d.endpointID, d.url, d.secret = *id, *eventID, *endpointID, *url, *secret
	d.sendTraceparent, d.attempt, d.enabled = *sendTraceparent, *attempt, true
	d.waits, d.raced = *waits, *raced
	if orderingKey != nil {
		d.orderingKey, d.orderingSeq = *orderingKey, *orderingSeq
	}
	d.leaseEnd = leaseEnd(sent, left)
	d.leased = d.attempt > 0 // a held delivery waits for the retry lane's admission
	return d, true, nil
}

// replayBornSQL creates the deliveries of already committed events — a
// replay's clones: $1 the events, $2 one endpoint's id, or NULL for where
// each clone's original went (addressedSQL), $3 the birth lease, $4 an
// unproven endpoint's cap (bornSQL). One statement is one transaction.
var replayBornSQL = `WITH ev AS (
	SELECT c.id, c.event_type, c.tenant_id, c.ordering_key, c.ordering_seq, coalesce($2::uuid, ` + addressedSQL("o") + `) AS target
	FROM webhook_events c JOIN webhook_events o ON o.id = coalesce(c.replay_of, c.id)
	WHERE c.id = ANY ($1::uuid[])
), ` + bornSQL("ev", "$3", "$4") + `
SELECT ` + bornColumns + `
FROM born JOIN webhook_endpoints ep ON ep.id = born.endpoint_id
ORDER BY born.event_id, ep.created_at`

// bornDeliveries runs replayBornSQL: endpointID "" means where each
// event's original went. events maps event id → the event.
func (p *Dispatcher) bornDeliveries(ctx context.Context, events map[string]event, endpointID string) ([]delivery, error) {
	ids := make([]string, 0, len(events))
	for id := range events {
		ids = append(ids, id)
	}
	var endpoint *string
	if endpointID != "" {
		endpoint = &endpointID
	}
	sent := time.Now()
	rows, err := p.pool.Query(ctx, replayBornSQL, ids, endpoint, p.lc.BirthLeaseWindow, p.cfg.Concurrency)
	if err != nil {
		return nil, fmt.Errorf("create deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (delivery, error) {
		d, _, err := scanBorn(row, sent)
		d.event = events[d.eventID]
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("create deliveries: %w", err)
	}
	p.metrics.engine().Claimed("webhook_deliveries", leased(ds)) // birth is the first attempt's claim
	return ds, nil
}

// firstAttempts are the units of freshly born deliveries ds: the first
// attempts of those born leased to this process, each under its event's
// fan-out span when spans has one, and a unit that looks again for each one
// born held whose birth may have raced the mark ahead of it (racedUnit).
// wake reports deliveries born held for admission, whose first attempt is
// the retry lane's to make; those held for their key's order wait for the
// mark of the delivery ahead to hand the key on.
func (p *Dispatcher) firstAttempts(ds []delivery, began time.Time, spans map[string]trace.SpanContext) (units []engine.Unit, wake bool) {
	for _, d := range ds {
		if d.orderingKey != "" {
			p.sawOrdered()
		}
		switch {
		case d.raced:
			units = append(units, p.racedUnit(d, began, spans[d.eventID]))
		case !d.leased:
			wake = wake || !d.waits
		default:
			units = append(units, &attemptUnit{p: p, d: d, fanOut: spans[d.eventID]})
		}
	}
	return units, wake
}

// leased counts the deliveries born leased, whose first attempt is this
// process's to make.
func leased(ds []delivery) int {
	n := 0
	for _, d := range ds {
		if d.leased {
			n++
		}
	}
	return n
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
