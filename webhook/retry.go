package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
)

// deliveriesTable is webhook_deliveries for the shared claim.
var deliveriesTable = claim.Table{
	Name:      "webhook_deliveries",
	DueColumn: "next_retry_at",
	// The lease left, as Postgres measures it: see leaseEnd.
	Returning: "id, attempts, EXTRACT(EPOCH FROM next_retry_at - clock_timestamp())::float8",

	// LEGACY BRANCH (see docs/design/outbox-transport.md, Deliveries written
	// before leases): deliveries written before deliveries were born leased
	// may be pending with next_retry_at NULL — the old fan-out inserted them
	// unleased. Without this branch they would never be claimed, so never
	// delivered: the claim reads a range of due times, and the sweep
	// (claim.Sweep) moves these into it. Every row born since is leased (see
	// bornDeliveriesSQL), so this can go once no pending row has a NULL
	// next_retry_at:
	//
	//	SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND next_retry_at IS NULL;
	//
	// Locked by TestRetry_ClaimsLegacyNullNextRetryAt.
	LegacyNullDue: true,

	// What an endpoint's max_in_flight counts; see throttle.go.
	LeaseColumn: "leased_until",

	// A disabled endpoint's deliveries are never claimed: they wait
	// behind the claim window without holding it back, and the sweep
	// brings them into it once the endpoint is enabled.
	//
	// Nor is a delivery that waits for an earlier one of its endpoint and
	// key (ordering.go): it too waits behind the window, and is brought
	// into it when the earlier one resolves (migration 00023's trigger),
	// or by the sweep.
	Claimable: "EXISTS (SELECT 1 FROM webhook_endpoints ep WHERE ep.id = webhook_deliveries.endpoint_id AND ep.enabled) AND NOT " +
		deliveryWaitsSQL("webhook_deliveries"),
}

type claimedDelivery struct {
	ID       string
	Attempts int
	Left     *float64
}

// DrainRetries is one retry pass that ends once nothing is due: tests,
// the bench and one-off passes use it (the product runs RunRetries behind
// a pool-wide gate: see docs/design/outbox-transport.md, Retry gating). It
// claims due pending deliveries — as many at a time as it has attempt
// slots for, at most RetryClaimBatch, with lease RetryClaimLease(n); the
// claim increments attempts — and attempts each, re-signed with a fresh
// timestamp, until no due delivery is left or window has passed; then it
// waits for the attempts it started.
//
// A claimed delivery never queues for a slot, so none is claimed — and
// its attempt counted — without being sent.
func (p *Dispatcher) DrainRetries(ctx context.Context, window time.Duration) (Tally, error) {
	return p.retryLane.Run(ctx, engine.RunOptions{Window: window, UntilIdle: true})
}

// RunRetries is the retry lane for window: it claims due deliveries
// whenever attempt slots are free, polling (retries come due by the clock,
// not by a notification), until window ends, ctx ends or the pipeline
// stops, then waits for the attempts it started. Run it behind the retry
// gate: one pool-wide at a time.
func (p *Dispatcher) RunRetries(ctx context.Context, window time.Duration) (Tally, error) {
	return p.RunRetryTurn(ctx, window, nil)
}

// RunRetryTurn is one gate holder's turn of the retry lane: RunRetries,
// calling handOver (if set) once its last claim has returned, before it
// waits for the attempts it started, so the gate's next holder claims while
// they finish.
func (p *Dispatcher) RunRetryTurn(ctx context.Context, window time.Duration, handOver func()) (Tally, error) {
	return p.retryLane.Run(ctx, engine.RunOptions{Window: window, ClaimsDone: handOver})
}

// retrySource is webhook_deliveries as the retry lane drains it.
type retrySource struct{ p *Dispatcher }

func (s retrySource) Claim(ctx context.Context, n int) (engine.Claim, error) {
	p := s.p
	if p.stopped.Load() {
		return engine.Claim{}, nil
	}
	n = min(n, p.lc.RetryClaimBatch)
	skip := p.crowdedEndpoints(n)
	ds, throttled, err := p.claimRetries(ctx, n, skip)
	if err != nil {
		return engine.Claim{}, err
	}
	units := make([]engine.Unit, len(ds))
	for i, d := range ds {
		units[i] = &attemptUnit{p: p, d: d}
	}
	// Throttled rows count as found, so the lane stays hot (HotPoll) and
	// takes them when their tokens come; they do not make the claim full,
	// which would have the lane claim again at once, in a busy loop.
	return engine.Claim{Units: units, Rows: len(ds) + throttled, Full: len(ds) == n, Crowded: len(skip) > 0 && len(ds) < n}, nil
}

// crowdedEndpoints are the endpoints a retry claim for n slots leaves
// alone: those that may fill none of them (engine.Slots.Crowded) — holding
// their share of this process's slots when the claim has no more than the
// headroom they leave, or paced with every slot they could hold taken or
// waited for.
func (p *Dispatcher) crowdedEndpoints(n int) []string {
	var skip []string
	for endpoint, slots := range p.slots.Crowded(n) {
		if slots == 0 {
			skip = append(skip, endpoint)
		}
	}
	return skip
}

// NextDue lets the idle retry lane come back when the next back-off
// ends rather than at its poll, so a retry is attempted when it is due.
func (s retrySource) NextDue(ctx context.Context) time.Duration { return s.p.nextRetry(ctx) }

// nextRetrySQL is how long until the first pending delivery not yet due
// comes due: one read of the claim index from now().
const nextRetrySQL = `SELECT EXTRACT(EPOCH FROM min(next_retry_at) - now())::float8
FROM webhook_deliveries WHERE status = 'pending' AND next_retry_at > now()`

// nextRetry is nextRetrySQL's wait, at least DefaultHotPoll; zero (poll
// as usual) when none is pending or the read failed.
func (p *Dispatcher) nextRetry(ctx context.Context) time.Duration {
	// A read slower than the poll would be no help.
	ctx, cancel := context.WithTimeout(ctx, engine.DefaultPoll)
	defer cancel()
	var secs *float64
	if err := p.pool.QueryRow(ctx, nextRetrySQL).Scan(&secs); err != nil || secs == nil {
		return 0
	}
	return max(time.Duration(*secs*float64(time.Second)), engine.DefaultHotPoll)
}

// Sweep moves the deliveries due behind the claim window into it, and the
// legacy ones with no due time (Table.LegacyNullDue).
func (s retrySource) Sweep(ctx context.Context) (int, []string, error) {
	return sweep(ctx, s.p.pool, deliveriesTable, &s.p.retryWindow)
}

// claimRetries claims up to n due deliveries through the pool-wide
// admission (claimAdmitted) and loads what their attempts need: the
// event's body and the endpoint's url, secrets and state. throttled counts
// the due rows admission held back.
//
// The claim is a transaction of several statements, then a load: it runs
// detached from ctx's cancellation (bounded by MarkTimeout, like a mark),
// so a lane window closing mid-claim cannot leave rows committed as
// claimed but never handed to an attempt — they would wait out their
// lease, minutes at RetryClaimLease.
func (p *Dispatcher) claimRetries(ctx context.Context, n int, skip []string) (ds []delivery, throttled int, err error) {
	if ctx.Err() != nil {
		return nil, 0, ctx.Err()
	}
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	sent := time.Now()
	claimed, throttled, err := p.claimAdmitted(ctx, n, p.lc.RetryClaimLease(n), skip)
	if err != nil || len(claimed) == 0 {
		return nil, throttled, err
	}
	p.metrics.engine().Claimed("webhook_deliveries", len(claimed))
	ids := make([]string, len(claimed))
	byID := make(map[string]claimedDelivery, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
		byID[c.ID] = c
	}
	ds, err = p.loadDeliveries(ctx, ids)
	if err != nil {
		// Claimed but unloadable: hand them back rather than let them wait
		// out a lease nobody is using.
		n, _ := claim.Release(ctx, p.pool, deliveriesTable, ids, "claimed but could not be loaded", p.logger)
		p.metrics.engine().Released("webhook_deliveries", int(n))
		return nil, throttled, err
	}
	for i := range ds {
		c := byID[ds[i].id]
		ds[i].attempt = c.Attempts
		ds[i].leaseEnd = leaseEnd(sent, c.Left)
		ds[i].leased = true
	}
	return ds, throttled, nil
}

// loadColumns is what an attempt needs of a claimed delivery (alias d),
// its event (e) and its endpoint (ep): scanLoaded reads it.
const loadColumns = `d.id, d.event_id, d.endpoint_id, ep.url, ep.secret, ` + olderSecretsSQL + `, ep.enabled,
	ep.send_traceparent, e.event_type, e.payload, e.created_at, coalesce(e.traceparent, ''), coalesce(d.ordering_key, ''), coalesce(d.ordering_seq, 0)`

// loaded is loadColumns as scanned. Its pointers let a mark's LEFT JOIN
// scan too: NULL there when the mark handed no key on (markSQL).
type loaded struct {
	id, eventID, endpointID, url, secret *string
	olderSecrets                         []string
	enabled, sendTraceparent             *bool
	eventType, traceparent, orderingKey  *string
	payload                              []byte
	createdAt                            *time.Time
	orderingSeq                          *int64
}

// targets are the scan targets of loadColumns, in order.
func (l *loaded) targets() []any {
	return []any{&l.id, &l.eventID, &l.endpointID, &l.url, &l.secret, &l.olderSecrets, &l.enabled,
		&l.sendTraceparent, &l.eventType, &l.payload, &l.createdAt, &l.traceparent, &l.orderingKey, &l.orderingSeq}
}

// delivery is the delivery l read; events caches each event's body for its
// other deliveries.
func (l *loaded) delivery(events map[string]event) (delivery, error) {
	if l.id == nil || l.eventID == nil || l.url == nil {
		return delivery{}, errors.New("a delivery, its event or its endpoint was not read")
	}
	d := delivery{id: *l.id, eventID: *l.eventID, endpointID: *l.endpointID, url: *l.url, secret: *l.secret,
		olderSecrets: l.olderSecrets, enabled: *l.enabled, sendTraceparent: *l.sendTraceparent,
		orderingKey: *l.orderingKey, orderingSeq: *l.orderingSeq}
	ev, ok := events[d.eventID]
	if !ok {
		var err error
		if ev, err = newEvent(*l.eventType, *l.createdAt, l.payload, *l.traceparent); err != nil {
			return d, err
		}
		events[d.eventID] = ev
	}
	d.event = ev
	return d, nil
}

// scanLoaded reads loadColumns, then the columns in after, into a
// delivery; events caches each event's body for its other deliveries.
func scanLoaded(row pgx.Row, events map[string]event, after ...any) (delivery, error) {
	var l loaded
	if err := row.Scan(append(l.targets(), after...)...); err != nil {
		return delivery{}, err
	}
	return l.delivery(events)
}

func (p *Dispatcher) loadDeliveries(ctx context.Context, ids []string) ([]delivery, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+loadColumns+`
FROM webhook_deliveries d
JOIN webhook_events e ON e.id = d.event_id
JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
WHERE d.id = ANY ($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("webhook: load claimed deliveries: %w", err)
	}
	events := map[string]event{}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (delivery, error) { return scanLoaded(row, events) })
	if err != nil {
		return nil, fmt.Errorf("webhook: load claimed deliveries: %w", err)
	}
	return ds, nil
}
