package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
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
// the next one due at once and wakes the retry lanes. The deliveries an
// attempt's chain leased ahead (attemptUnit.Run) hold their key for that
// chain alone: it sends each once the one before was accepted.

// orderedWaitSQL is the SQL test that a delivery must wait for an earlier
// one of its endpoint and key. Its three arguments are SQL expressions:
// the delivery's endpoint id, its ordering key and its place.
func orderedWaitSQL(endpoint, key, seq string) string {
	return orderedWait(endpoint, key, seq, "")
}

// lockingWaitSQL is orderedWaitSQL for takeRaced, which locks the earlier
// delivery it finds (FOR SHARE): a mark in progress on that delivery makes
// it wait for the mark's commit and then read the row's newest version.
// The outbox half takes no lock: a row another claim is fanning out must
// keep its later rows waiting until its deliveries are visible.
func lockingWaitSQL(endpoint, key, seq string) string {
	return orderedWait(endpoint, key, seq, " FOR SHARE OF ahead")
}

func orderedWait(endpoint, key, seq, lock string) string {
	return fmt.Sprintf(`(%[2]s IS NOT NULL AND (EXISTS (SELECT 1 %[4]s%[5]s)
	OR EXISTS (
	SELECT 1 FROM webhook_outbox ob
	WHERE ob.ordering_key = %[2]s AND ob.status = 'pending' AND ob.ordering_seq < %[3]s
		AND (ob.attempts > 0 OR ob.next_attempt_at <= now()))))`, endpoint, key, seq, aheadSQL(endpoint, key, seq), lock)
}

// aheadSQL is the FROM and WHERE of the earlier deliveries (alias ahead)
// that hold a delivery back.
func aheadSQL(endpoint, key, seq string) string {
	return fmt.Sprintf(`FROM webhook_deliveries ahead
	WHERE ahead.endpoint_id = %[1]s AND ahead.ordering_key = %[2]s AND ahead.ordering_seq < %[3]s
		AND ahead.status <> 'succeeded'
		AND (ahead.status = 'pending' OR (ahead.status = 'failed' AND ahead.order_skipped_at IS NULL
			AND (SELECT o.order_on_failure FROM webhook_endpoints o WHERE o.id = ahead.endpoint_id) = 'block'))`, endpoint, key, seq)
}

// waitsBehindSQL is orderedWaitSQL with the earlier deliveries for which
// the SQL condition ours holds left out: those the statement's caller
// holds itself — the delivery its mark resolves, which the statement's
// snapshot still sees pending, and the ones leased ahead of it
// (handOnCTE). A condition that comes out NULL leaves nothing out.
func waitsBehindSQL(endpoint, key, seq, ours string) string {
	return strings.Replace(orderedWaitSQL(endpoint, key, seq), "WHERE ahead.endpoint_id", "WHERE NOT coalesce("+ours+", false) AND ahead.endpoint_id", 1)
}

// deliveryWaitsSQL is orderedWaitSQL for a webhook_deliveries row named
// by alias; waitsForSQL is the first earlier delivery that holds it back,
// for the readers (NULL for none).
func deliveryWaitsSQL(alias string) string {
	return orderedWaitSQL(alias+".endpoint_id", alias+".ordering_key", alias+".ordering_seq")
}

func waitsForSQL(alias string) string {
	return fmt.Sprintf(`(SELECT ahead.id::text %s ORDER BY ahead.ordering_seq LIMIT 1)`,
		aheadSQL(alias+".endpoint_id", alias+".ordering_key", alias+".ordering_seq"))
}

// behindSQL counts the pending deliveries of a delivery's endpoint and
// key that come after it: while it holds the key, they wait.
func behindSQL(alias string) string {
	return fmt.Sprintf(`(SELECT count(*) FROM webhook_deliveries behind
	WHERE %[1]s.ordering_key IS NOT NULL AND behind.endpoint_id = %[1]s.endpoint_id
		AND behind.ordering_key = %[1]s.ordering_key AND behind.ordering_seq > %[1]s.ordering_seq
		AND behind.status = 'pending')`, alias)
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

// Policies of webhook_endpoints.order_on_failure: what the rest of a key
// does once one of its deliveries fails for good.
const (
	// OrderBlock holds the rest of the key until the failed delivery is
	// requeued (and delivered) or skipped: the receiver never sees a
	// key's events out of order. The default: a receiver that asked for
	// order is better served by a key that waits, visibly (worker
	// ordering blocked, the postbox_webhook_ordered_keys_blocked gauge),
	// than by invoice.paid arriving after an invoice.created it never got.
	OrderBlock = "block"
	// OrderProceed lets the rest of the key go on without it.
	OrderProceed = "proceed"
)

// SetOrderOnFailure sets endpoint id's order_on_failure policy.
func SetOrderOnFailure(ctx context.Context, db DB, id, policy string) error {
	if err := validateID(id); err != nil {
		return err
	}
	if policy != OrderBlock && policy != OrderProceed {
		return fmt.Errorf("%w: order on failure %q: want %s or %s", ErrInvalidEndpoint, policy, OrderBlock, OrderProceed)
	}
	tag, err := db.Exec(ctx, `UPDATE webhook_endpoints SET order_on_failure = $2, updated_at = now() WHERE id = $1`, id, policy)
	if err != nil {
		return fmt.Errorf("webhook: set order on failure of endpoint %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	return nil
}

// BlockedKey is a key of one endpoint that a failed delivery holds back.
type BlockedKey struct {
	EndpointID  string    `json:"endpoint_id"`
	EndpointURL string    `json:"endpoint_url"` // redacted: no query string or userinfo
	OrderingKey string    `json:"ordering_key"`
	Head        string    `json:"head_delivery_id"` // the failed delivery to requeue or skip
	LastError   string    `json:"last_error,omitempty"`
	FailedSince time.Time `json:"failed_since"` // the head's last attempt
	Waiting     int       `json:"waiting"`      // pending deliveries behind it
}

// blockedKeysSQL finds every (endpoint, key) whose earliest failed,
// unskipped delivery holds pending ones behind it under the block policy,
// through the ordering index (keyed rows not delivered only).
var blockedKeysSQL = `SELECT DISTINCT ON (h.endpoint_id, h.ordering_key)
	h.endpoint_id::text, ep.url, h.ordering_key, h.id::text, coalesce(h.last_error, ''),
	coalesce((SELECT max(a.created_at) FROM webhook_delivery_attempts a WHERE a.delivery_id = h.id), h.created_at),
	` + behindSQL("h") + `
FROM webhook_deliveries h
JOIN webhook_endpoints ep ON ep.id = h.endpoint_id AND ep.order_on_failure = 'block'
WHERE h.ordering_key IS NOT NULL AND h.status = 'failed' AND h.order_skipped_at IS NULL
	AND EXISTS (SELECT 1 FROM webhook_deliveries b WHERE b.endpoint_id = h.endpoint_id
		AND b.ordering_key = h.ordering_key AND b.ordering_seq > h.ordering_seq AND b.status = 'pending')
ORDER BY h.endpoint_id, h.ordering_key, h.ordering_seq
LIMIT $1`

// BlockedKeys lists up to limit keys held back by a failed delivery.
func BlockedKeys(ctx context.Context, db DB, limit int) ([]BlockedKey, error) {
	rows, err := db.Query(ctx, blockedKeysSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("webhook: blocked keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (BlockedKey, error) {
		var k BlockedKey
		err := row.Scan(&k.EndpointID, &k.EndpointURL, &k.OrderingKey, &k.Head, &k.LastError, &k.FailedSince, &k.Waiting)
		k.EndpointURL = redactURL(k.EndpointURL)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: blocked keys: %w", err)
	}
	return keys, nil
}

// maxCountedBlockedKeys bounds CountBlockedKeys' scan, for a gauge read
// at every scrape.
const maxCountedBlockedKeys = 10000

// CountBlockedKeys counts the keys BlockedKeys lists, up to 10,000.
func CountBlockedKeys(ctx context.Context, db DB) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (`+blockedKeysSQL+`) k`, maxCountedBlockedKeys).Scan(&n); err != nil {
		return 0, fmt.Errorf("webhook: count blocked keys: %w", err)
	}
	return n, nil
}

// leaseSet is the SET list (claim.Set) of an ordered claim of delivery n
// under the lease in the SQL parameter lease, from clock_timestamp(): the
// hand-on's (handOnCTE), takeRacedSQL's and claimTurnsSQL's.
func leaseSet(lease string) string {
	return claim.Set("n", "clock_timestamp() + "+lease+"::interval", "next_retry_at", "leased_until")
}

// takeRacedSQL claims born-held delivery $1 for a first attempt under the
// lease $2 if it may go now: never claimed, to an enabled endpoint that
// needs no admission, and waiting for nothing, the earlier delivery it
// found locked (lockingWaitSQL) so that a mark in progress on it is waited
// for rather than missed.
var takeRacedSQL = `UPDATE webhook_deliveries n SET ` + leaseSet("$2") + `
WHERE n.id = (
	SELECT d.id FROM webhook_deliveries d
	JOIN webhook_endpoints ep ON ep.id = d.endpoint_id AND ep.enabled AND NOT ` + needsAdmission + `
	WHERE d.id = $1 AND d.status = 'pending' AND d.attempts = 0
		AND NOT ` + lockingWaitSQL("d.endpoint_id", "d.ordering_key", "d.ordering_seq") + `
	FOR UPDATE OF d SKIP LOCKED)
RETURNING n.attempts, EXTRACT(EPOCH FROM n.next_retry_at - clock_timestamp())::float8`

// takeRaced settles a delivery born held behind an earlier one whose mark
// may have raced its birth (delivery.raced), once its birth has committed:
// if it may go now, it is claimed for this process's attempt, in a
// statement of its own that holds no other lock while it waits for the
// mark in progress — so it cannot deadlock with a group of marks — and d
// comes back leased. It reports whether d was taken; one that still waits
// is left to the marks.
func (p *Dispatcher) takeRaced(ctx context.Context, d *delivery) bool {
	// Detached like a claim: a claimed row must reach its attempt.
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	sent := time.Now()
	var left *float64
	err := p.pool.QueryRow(ctx, takeRacedSQL, d.id, p.lc.RetryClaimLease(1)).Scan(&d.attempt, &left)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// It still waits: the mark of the delivery ahead hands the key on.
		return false
	case err != nil:
		p.logger.Warn("could not look again at a delivery born behind a mark in progress; the sweep will", "delivery_id", d.id, "error", err.Error())
		return false
	}
	d.leaseEnd, d.leased = leaseEnd(sent, left), true
	p.metrics.engine().Claimed(deliveriesTable.Name, 1)
	return true
}

// turnsTable is webhook_deliveries as the outbox lanes claim the ordered
// deliveries whose turn has come: never attempted and due — made due when
// the delivery ahead resolved (migration 00023's trigger), or given back by
// passTurn — to an enabled endpoint that needs no admission, waiting for
// nothing. Retries are the retry lane's; they have a last error.
var turnsTable = claim.Table{
	Name:        deliveriesTable.Name,
	DueColumn:   deliveriesTable.DueColumn,
	LeaseColumn: deliveriesTable.LeaseColumn,
	Claimable: "webhook_deliveries.ordering_key IS NOT NULL AND webhook_deliveries.last_error IS NULL" +
		" AND EXISTS (SELECT 1 FROM webhook_endpoints ep WHERE ep.id = webhook_deliveries.endpoint_id AND ep.enabled AND NOT " + needsAdmission + ")" +
		" AND NOT " + deliveryWaitsSQL("webhook_deliveries"),
}

// claimTurnsSQL claims up to $1 of turnsTable's rows from the window's edge
// $3 under the lease $2 (counting the attempt, as every claim), and loads what
// their attempts need in the same statement.
var claimTurnsSQL = `WITH claimed AS (
	UPDATE webhook_deliveries n SET ` + leaseSet("$2") + `
	WHERE n.id = ANY (ARRAY(` + turnsTable.ClaimIDsSQL("$1", "$3") + `)) AND n.status = 'pending'
	RETURNING n.id, n.attempts, EXTRACT(EPOCH FROM n.next_retry_at - clock_timestamp())::float8 AS left
)
SELECT ` + loadColumns + `, c.attempts, c.left
FROM claimed c
JOIN webhook_deliveries d ON d.id = c.id
JOIN webhook_events e ON e.id = d.event_id
JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
ORDER BY d.ordering_seq`

// orderedRecently reports whether this replica saw an ordered delivery in
// the last minute: only then do its outbox claims look for turns, so that
// a pool with no ordering keys runs no statement for them.
func (p *Dispatcher) orderedRecently() bool {
	return time.Since(time.Unix(0, p.orderedAt.Load())) < time.Minute
}

// sawOrdered notes that this replica handled an ordered delivery.
func (p *Dispatcher) sawOrdered() { p.orderedAt.Store(time.Now().UnixNano()) }

// claimTurns claims up to n ordered deliveries whose turn has come
// (turnsTable) as first attempts for this replica: the outbox lanes of
// every replica take them, so a key goes on wherever a slot is free.
func (p *Dispatcher) claimTurns(ctx context.Context, n int) ([]engine.Unit, error) {
	sent := time.Now()
	events := map[string]event{}
	ds, err := claim.ClaimWith(ctx, p.pool, turnsTable, &p.turnWindow, claimTurnsSQL, n, p.lc.RetryClaimLease(1),
		func(row pgx.CollectableRow) (delivery, error) {
			var left *float64
			var attempt int
			d, err := scanLoaded(row, events, &attempt, &left)
			d.attempt, d.leaseEnd, d.leased = attempt, leaseEnd(sent, left), true
			return d, err
		})
	if err != nil {
		return nil, fmt.Errorf("webhook: claim ordered turns: %w", err)
	}
	p.metrics.engine().Claimed(deliveriesTable.Name, len(ds))
	units := make([]engine.Unit, len(ds))
	for i, d := range ds {
		units[i] = &attemptUnit{p: p, d: d}
	}
	return units, nil
}

// passTurn gives the delivery a mark handed its key on to back, due now
// and unleased with the attempt its hand-on counted, for any replica's
// claimTurns: see attemptUnit.Run.
func (p *Dispatcher) passTurn(ctx context.Context, id string) Tally {
	// Turns pass often under load: only a failure is worth a log line.
	n, err := claim.Release(ctx, p.pool, deliveriesTable, []string{id}, "an ordered key's turn passed on", quiet)
	if err != nil {
		// It waits out its lease, then the retry lane takes it.
		p.logger.Warn("could not pass an ordered key's turn on; it waits out its lease", "delivery_id", id, "error", err.Error())
	}
	p.metrics.engine().Released(deliveriesTable.Name, int(n))
	return Tally{Released: int(n)}
}

// quiet discards claim.Release's own log lines where the caller logs.
var quiet = slog.New(slog.DiscardHandler)
