package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/pgtext"
	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/leases"
)

// outboxTable is webhook_outbox for the shared claim: FOR UPDATE SKIP
// LOCKED, lease stamp, attempts incremented there and nowhere else. Its
// rows are claimed fairly, round-robin over their share key (shareKeySQL).
var outboxTable = claim.Table{Name: "webhook_outbox", DueColumn: "next_attempt_at", Returning: "id, attempts, coalesce(traceparent, '')",
	Fair: &claim.Share{Key: shareKeySQL}}

// shareKeySQL is whose a webhook_outbox row is, for the fan-out's fair
// claim: its tenant; for an event of no tenant, the endpoint it is
// addressed to; ” for one fanned out to every endpoint of no tenant.
// Migration 00034's index is on this expression, spelled the same.
const shareKeySQL = "coalesce(webhook_outbox.tenant_id, webhook_outbox.endpoint_id::text, '')"

type outboxRow struct {
	ID          string
	Attempts    int
	Traceparent string // the trace the event was enqueued in, "" for none
}

// Dispatch is what DispatchFromOutbox created.
type Dispatch struct {
	EventID    string
	Deliveries int // one per enabled endpoint subscribed to the event type
}

// Drain runs the webhook_outbox lane until the outbox has no more due rows
// or window has passed, then waits for the first attempts it started:
// tests, the bench and one-off passes use it. RunTimeout(window) bounds it.
func (p *Dispatcher) Drain(ctx context.Context, window time.Duration) (Tally, error) {
	return p.outboxLane.Run(ctx, engine.RunOptions{Window: window, UntilIdle: true})
}

// Run is one shift of the webhook_outbox lane on this replica: it
// claims whenever rows are due and attempt slots are free — woken by
// Config.Wake, else by its poll — until window ends, ctx ends or the
// pipeline stops, then waits for what it started.
func (p *Dispatcher) Run(ctx context.Context, window time.Duration) (Tally, error) {
	return p.outboxLane.Run(ctx, engine.RunOptions{Window: window})
}

// outboxSource is webhook_outbox as the engine's Lane drains it: each claim
// fans its rows out in the same statement, and its units are the first
// attempts of the deliveries born leased to this process.
type outboxSource struct{ p *Dispatcher }

// Sweep moves the outbox rows due behind the claim window into it.
func (s outboxSource) Sweep(ctx context.Context) (int, []string, error) {
	return sweep(ctx, s.p.pool, outboxTable, &s.p.outboxFair)
}

func sweep(ctx context.Context, db DB, t claim.Table, w claim.Edges) (int, []string, error) {
	s, err := claim.Sweep(ctx, db, t, w)
	if err != nil {
		err = fmt.Errorf("webhook: %w", err)
	}
	return s.Rows, s.First, err
}

// fanOutSQL fans out, in ONE statement, the pending webhook_outbox rows
// whose ids the query rows selects (see docs/design/outbox-transport.md,
// Atomic fan-out): it CAS-marks each row dispatched (and sets its attempts
// as the SQL assignment counted says, for the row o), copies it into its event —
// inside the database: the payload makes no round trip through this
// process first — and creates the event's deliveries (bornSQL), $2 being
// the birth lease. A crash leaves all of it or none of it; a row that is no
// longer pending yields nothing, so no row yields a second event (whose
// primary key, the row's own id, refuses one besides).
//
// The event takes the row's own id, so the id Enqueue returns (or plain
// SQL's INSERT … RETURNING id) is the webhook-id every receiver sees.
// Events fanned out before this kept ids of their own. An event addressed
// to one endpoint (the operator notice, webhook_outbox.endpoint_id) goes to
// that endpoint only, and keeps the address (webhook_events.endpoint_id)
// for its replays once the row is pruned; a row addressed to an endpoint
// of another tenant (misaddressedSQL) is marked failed, saying so, and
// makes no event. The event keeps its row's tenant.
//
// A row of a catalog type with a schema is fanned out only once its
// payload was checked against that schema (schema.go): the SQL expression
// checked is the digest of the schema the row's payload was checked
// against, NULL for none yet. A row whose type's schema is not that one
// is not fanned out but leased ($2) and returned, its payload to be
// checked (checkedFanOut) — it stays pending, so a replica that dies
// meanwhile leaves it to the next claim.
//
// It returns a row per delivery, with its event's columns first, a row
// with NULL delivery columns for an event no endpoint subscribed to, in
// the order the events were enqueued, and a row for each unchecked row
// (whose first column is true), with its type's schema digest.
func fanOutSQL(rows, counted, checked, unproven string) string {
	return `WITH claimed AS (
	UPDATE webhook_outbox o SET (status, dispatched_at, last_error, next_attempt_at) = (SELECT
			CASE WHEN f.misaddressed THEN 'failed' WHEN f.unchecked THEN 'pending' ELSE 'dispatched' END,
			CASE WHEN f.misaddressed OR f.unchecked THEN NULL ELSE now() END,
			CASE WHEN f.misaddressed THEN ` + misaddressedError + ` END,
			CASE WHEN f.unchecked AND NOT f.misaddressed THEN now() + $2::interval ELSE o.next_attempt_at END
		FROM (SELECT ` + misaddressedSQL + ` AS misaddressed,
			coalesce((SELECT t.schema_digest FROM webhook_event_types t WHERE t.name = o.event_type), '') <> coalesce(` + checked + `, '') AS unchecked) f),
		` + counted + `
	WHERE o.id = ANY (ARRAY(` + rows + `)) AND o.status = 'pending'
	RETURNING o.id, o.event_type, o.payload, o.endpoint_id, o.traceparent, o.ordering_key, o.ordering_seq, o.tenant_id, o.status, o.attempts
), inserted AS (
	INSERT INTO webhook_events (id, event_type, payload, outbox_id, traceparent, ordering_key, ordering_seq, endpoint_id, tenant_id)
	SELECT id, event_type, payload, id, traceparent, ordering_key, coalesce(ordering_seq, nextval('postbox_ordering_seq')), endpoint_id, tenant_id FROM claimed
	WHERE status = 'dispatched'
	RETURNING id, created_at, ordering_key, ordering_seq
), ev AS (
	SELECT c.id, c.event_type, c.tenant_id, i.ordering_key, i.ordering_seq, c.endpoint_id AS target
	FROM inserted i JOIN claimed c ON c.id = i.id
), ` + bornSQL("ev", "$2", unproven) + `
SELECT c.status = 'pending', CASE WHEN c.status = 'pending' THEN (SELECT t.schema_digest FROM webhook_event_types t WHERE t.name = c.event_type) END, c.attempts,
	c.id::text, c.event_type, c.payload, coalesce(i.created_at, now()), coalesce(c.traceparent, ''), ` + outboxTable.ShareKeyOn("c") + `, ` + bornColumns + `
FROM claimed c LEFT JOIN inserted i ON i.id = c.id LEFT JOIN born ON born.event_id = i.id LEFT JOIN webhook_endpoints ep ON ep.id = born.endpoint_id
WHERE c.status <> 'failed'
ORDER BY i.ordering_seq, ep.created_at`
}

// The two fan-outs: a lane's claim, which takes its rows as the fair claim
// does ($1 rows at most, with the fair claim's parameters up to $11,
// claim.FairIDsSQL) and counts their attempt, the claim being the one
// place attempts go up; and given rows' ($1), already claimed or named by
// an operator, each checked against the schema whose digest is at the same
// place in $4 (NULL or missing: none). $2 is the birth lease; the last, an
// unproven endpoint's cap (bornSQL).
var (
	claimFanOutSQL = fanOutSQL(outboxTable.FairIDsSQL("$1::int"), claim.Set("o", ""), "NULL", "$12")
	// firstFanOutSQL is claimFanOutSQL taking the first due rows, for the
	// claims of a lane that knows no share key (claim.FairOptions.FirstComeSQL).
	firstFanOutSQL = fanOutSQL(outboxTable.ClaimIDsSQL("$1::int", "$3"), claim.Set("o", ""), "NULL", "$4")
	rowFanOutSQL   = fanOutSQL("SELECT unnest($1::uuid[])", "attempts = o.attempts",
		"(SELECT c.digest FROM unnest($1::uuid[], $4::text[]) AS c(id, digest) WHERE c.id = o.id)", "$3")
)

// fannedEvent is one event a fan-out made.
type fannedEvent struct {
	id          string
	traceparent string
}

// fanOut is what a fan-out made: its events, in the order they were
// enqueued, and their deliveries; and the rows it left pending for their
// payloads to be checked against their type's schema.
type fanOut struct {
	events     []fannedEvent
	deliveries []delivery
	unchecked  []uncheckedRow
}

// add appends what another fan-out made.
func (f *fanOut) add(o fanOut) {
	f.events = append(f.events, o.events...)
	f.deliveries = append(f.deliveries, o.deliveries...)
	f.unchecked = append(f.unchecked, o.unchecked...)
}

// uncheckedRow is a row a fan-out leased for its payload to be checked
// against the schema digest names.
type uncheckedRow struct {
	row               outboxRow
	eventType, digest string
	payload           []byte
}

// fanOutRow is one row of fanOutSQL.
type fanOutRow struct {
	unchecked                       bool
	digest                          *string
	attempts                        int
	eventID, eventType, traceparent string
	share                           string // its outbox row's share key (shareKeySQL)
	payload                         []byte
	createdAt                       time.Time
	d                               delivery
	ok                              bool // d was born
}

func scanFanOutRow(sent time.Time) pgx.RowToFunc[fanOutRow] {
	return func(row pgx.CollectableRow) (fanOutRow, error) {
		var r fanOutRow
		var err error
		r.d, r.ok, err = scanBorn(row, sent, &r.unchecked, &r.digest, &r.attempts, &r.eventID, &r.eventType, &r.payload, &r.createdAt, &r.traceparent, &r.share)
		return r, err
	}
}

// collect turns fanOutSQL's rows into a fanOut, building each event's body
// once for all its deliveries.
func collect(rows []fanOutRow) (fanOut, error) {
	var fan fanOut
	events := map[string]event{}
	for _, r := range rows {
		if r.unchecked {
			u := uncheckedRow{row: outboxRow{ID: r.eventID, Attempts: r.attempts}, eventType: r.eventType, payload: r.payload}
			if r.digest != nil {
				u.digest = *r.digest
			}
			fan.unchecked = append(fan.unchecked, u)
			continue
		}
		ev, seen := events[r.eventID]
		if !seen {
			var err error
			if ev, err = newEvent(r.eventType, r.createdAt, r.payload, r.traceparent); err != nil {
				return fanOut{}, fmt.Errorf("event %s: body: %w", r.eventID, err)
			}
			events[r.eventID] = ev
			fan.events = append(fan.events, fannedEvent{id: r.eventID, traceparent: r.traceparent})
		}
		if r.ok {
			r.d.event, r.d.share = ev, r.share
			fan.deliveries = append(fan.deliveries, r.d)
		}
	}
	return fan, nil
}

// maxCheckRounds bounds checkedFanOut's rounds: each is a catalog change
// between a check and the fan-out that follows it.
const maxCheckRounds = 3

// checkedFanOut checks the payloads of rows a fan-out left unchecked
// against their type's schema, marks those that fail failed, saying where
// (as EnqueueEvent would have refused them), and fans out the rest in one
// statement, which passes each row's digest so the statement
// fans it out only if the schema is still that one. A row whose schema
// changed meanwhile is checked again; one that cannot be checked (its
// schema does not compile, the database failed) is recorded
// (markOutboxFailure) and retried on outboxBackoff.
func (p *Dispatcher) checkedFanOut(ctx context.Context, unchecked []uncheckedRow) (fanOut, Tally) {
	var (
		fan fanOut
		t   Tally
	)
	for round := 0; len(unchecked) > 0; round++ {
		var ids, digests []string
		for _, u := range unchecked {
			err := schemas.check(ctx, p.pool, u.eventType, u.digest, u.payload)
			switch {
			case err == nil:
				ids, digests = append(ids, u.row.ID), append(digests, u.digest)
			case errors.Is(err, ErrPayloadSchema) || errors.Is(err, ErrInvalidPayload):
				t.Add(p.markOutboxFailure(ctx, u.row, err, true))
			case errors.Is(err, errSchemaGone) && round < maxCheckRounds:
				ids, digests = append(ids, u.row.ID), append(digests, "") // read its schema again below
			default:
				t.Add(p.markOutboxFailure(ctx, u.row, err, false))
			}
		}
		if len(ids) == 0 {
			break
		}
		more, err := p.fanOutRows(ctx, p.pool, ids, digests)
		if err != nil {
			for _, u := range unchecked {
				if slices.Contains(ids, u.row.ID) {
					t.Add(p.markOutboxFailure(ctx, u.row, err, false))
				}
			}
			break
		}
		unchecked, more.unchecked = more.unchecked, nil
		fan.add(more)
		if round == maxCheckRounds {
			break // still changing: the rows' leases run out and the next claim takes them
		}
	}
	return fan, t
}

// fanOutRows fans out the given rows (rowFanOutSQL), each checked against
// the schema of the digest at the same place in digests.
func (p *Dispatcher) fanOutRows(ctx context.Context, db DB, ids, digests []string) (fanOut, error) {
	sent := time.Now()
	q, err := db.Query(ctx, rowFanOutSQL, ids, p.lc.BirthLeaseWindow, p.cfg.Concurrency, digests)
	if err != nil {
		return fanOut{}, err
	}
	rows, err := pgx.CollectRows(q, scanFanOutRow(sent))
	if err != nil {
		return fanOut{}, err
	}
	return collect(rows)
}

// Claim claims up to about n slots' worth of due outbox rows, and a few
// more, and fans them
// out in the same statement (claimFanOutSQL, with the claim window's read of
// where to start next, one implicit transaction): no row is ever claimed
// and not yet fanned out, so a replica that dies holds nothing but the
// leases of the deliveries born to it. Its units are those deliveries'
// first attempts, more than n when the rows fan out wider than foreseen:
// the Lane starts the rest as slots free, each within its birth lease
// (engine.Expiring).
//
// If the server refuses the statement — one row cannot be fanned out — the
// claim falls back to claiming with a lease and fanning each row out on its
// own (claimRowByRow), so one bad row is recorded and retried on its own
// schedule while the rest go out.
func (s outboxSource) Claim(ctx context.Context, n int) (engine.Claim, error) {
	p := s.p
	// A few attempts beyond the free slots wait in the lane for the next
	// slot to free, so a slot whose attempt has just marked starts the
	// next at once instead of after a claim's round trip.
	k := p.fanOutWidth.rows(n + max(p.slots.Cap()/8, 1))
	most := p.crowdedShares(n)
	began := time.Now()
	rows, _, more, err := claim.ClaimFair(ctx, p.pool, outboxTable, &p.outboxFair, k, p.lc.BirthLeaseWindow,
		claim.FairOptions{SQL: claimFanOutSQL, FirstComeSQL: firstFanOutSQL, Args: []any{p.cfg.Concurrency}, Most: most}, scanFanOutRow(began), fanOutKey)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		p.logger.Warn("batched fan-out refused; fanning the rows out one by one", "error", err.Error())
		return p.claimRowByRow(ctx, k, began)
	case err != nil:
		return engine.Claim{}, fmt.Errorf("webhook: %w", err)
	}
	fan, err := collect(rows)
	if err != nil {
		return engine.Claim{}, fmt.Errorf("webhook: fan-out: %w", err)
	}
	claimed := len(fan.events) + len(fan.unchecked)
	var checked Tally
	if len(fan.unchecked) > 0 {
		more, t := p.checkedFanOut(ctx, fan.unchecked)
		fan.add(more)
		checked = t
	}
	c := p.units(ctx, fan, began)
	c.Tally.Add(checked)
	if free := n - len(c.Units); free > 0 && p.orderedRecently() {
		turns, err := p.claimTurns(ctx, free)
		if err != nil {
			return c, err
		}
		c.Units = append(c.Units, turns...)
		c.Rows += len(turns)
	}
	c.Full = claimed == k
	c.Crowded = !c.Full && more && len(most) > 0
	return c, nil
}

// noteShare records the share key d's endpoint was fanned out under
// (shares). A fan-out makes many deliveries to the same endpoints under
// the same key: it reads first, and writes only a change.
func (p *Dispatcher) noteShare(d delivery) {
	if was, ok := p.shares.Load(d.endpointID); !ok || was.(string) != d.share {
		p.shares.Store(d.endpointID, d.share)
	}
}

// fanOutKey is a fan-out row's key in the fair claim.
func fanOutKey(r fanOutRow) claim.ShareKey { return claim.ShareKey{Key: r.share} }

// crowdedShares caps, for a fan-out claim for n slots, the rows of each
// share key whose endpoint may fill fewer of them (engine.Slots.Crowded):
// one holding its share of this process's slots, or paced. Their backlog
// waits for their own slots to come back, and the slots left free take
// the other keys' rows as they come. The share of a no-tenant event
// fanned out to every endpoint ("") is never capped: it is everyone's.
func (p *Dispatcher) crowdedShares(n int) map[string]int {
	crowded := p.slots.Crowded(n)
	if len(crowded) == 0 {
		return nil
	}
	most := make(map[string]int, len(crowded))
	for endpoint, slots := range crowded {
		share, ok := p.shares.Load(endpoint)
		if !ok || share.(string) == "" {
			continue
		}
		rows := 0
		if slots > 0 {
			rows = p.fanOutWidth.rows(slots)
		}
		if was, ok := most[share.(string)]; !ok || rows < was {
			most[share.(string)] = rows
		}
	}
	return most
}

// claimRowByRow claims up to k outbox rows (at most BatchSize) under the
// lease of a batch, then fans each out in a transaction of its own: the
// path of a batch the server refused. A row whose fan-out fails is
// recorded (markOutboxFailure) and retried on outboxBackoff. The chain
// BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease(BatchSize)
// (leases.Validate) means every claimed row is fanned out or recorded
// before its lease can expire under a sibling.
func (p *Dispatcher) claimRowByRow(ctx context.Context, k int, began time.Time) (engine.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, p.lc.BatchTimeout)
	defer cancel()
	claimed, err := claim.Claim(ctx, p.pool, outboxTable, p.outboxFair.Arrival(), min(k, p.lc.BatchSize), p.lc.ClaimLease(p.lc.BatchSize), pgx.RowToStructByPos[outboxRow])
	if err != nil {
		return engine.Claim{}, fmt.Errorf("webhook: %w", err)
	}
	var (
		fan fanOut
		t   Tally
	)
	for _, row := range claimed {
		rowCtx, cancelRow := context.WithTimeout(ctx, p.lc.PerRowBudget)
		one, err := p.dispatch(rowCtx, row.ID)
		cancelRow()
		switch {
		case errors.Is(err, ErrStaleOutboxMark):
			p.metrics.engine().Stale(outboxTable.Name)
			p.logger.Warn("stale outbox mark: row already dispatched by a sibling; fan-out rolled back", "outbox_id", row.ID)
			t.Stale++
		case err != nil:
			t.Add(p.markOutboxFailure(ctx, row, err, false))
		default:
			fan.add(one)
		}
	}
	if len(fan.unchecked) > 0 {
		more, checked := p.checkedFanOut(ctx, fan.unchecked)
		fan.unchecked = nil
		fan.add(more)
		t.Add(checked)
	}
	c := p.units(ctx, fan, began)
	c.Tally.Add(t)
	c.Rows, c.Full = len(claimed), len(claimed) == min(k, p.lc.BatchSize)
	return c, nil
}

// units turns what a claim fanned out into the first attempts of the
// deliveries born leased to this process, each under its event's fan-out
// span, which joins the trace the event was enqueued in (firstAttempts).
//
// A panic while doing so is recorded on every leased delivery as a failed
// attempt carrying the panic value, as a unit's would be: no River job
// guards this goroutine's claim past its commit.
func (p *Dispatcher) units(ctx context.Context, fan fanOut, began time.Time) (c engine.Claim) {
	c.Rows = len(fan.events)
	c.Tally.Events = len(fan.events)
	p.metrics.engine().Claimed(outboxTable.Name, len(fan.events))
	p.metrics.engine().Claimed(deliveriesTable.Name, leased(fan.deliveries)) // birth is the first attempt's claim
	defer func() {
		if v := recover(); v != nil {
			c.Units = nil
			p.logger.Error("panic turning a fan-out into its first attempts; they are recorded as failed attempts", "panic", fmt.Sprint(v))
			for _, d := range fan.deliveries {
				if d.leased {
					c.Tally.Add((&attemptUnit{p: p, d: d}).Panicked(ctx, v))
				}
			}
			c.Tally.Panics++
			c.Tally.NoteError((&engine.PanicError{Value: v}).Error())
		}
	}()
	spans := make(map[string]trace.SpanContext, len(fan.events))
	perEvent := map[string]int{}
	for _, d := range fan.deliveries {
		perEvent[d.eventID]++
		p.noteShare(d)
	}
	for _, ev := range fan.events {
		if h := p.hooks.beforeDispatch; h != nil {
			h(ev.id)
		}
		p.metrics.eventDispatched()
		spanCtx, opts := tracing.ForRow(ctx, ev.traceparent)
		_, span := p.tracer.Start(spanCtx, tracing.SpanWebhookFanOut, append(opts, trace.WithTimestamp(began))...)
		if span.IsRecording() {
			span.SetAttributes(tracing.RowID.String(ev.id), tracing.EventID.String(ev.id), tracing.Deliveries.Int(perEvent[ev.id]))
		}
		span.End()
		spans[ev.id] = span.SpanContext()
	}
	var wake bool
	c.Units, wake = p.firstAttempts(fan.deliveries, began, spans)
	if wake {
		p.wakeRetries()
	}
	p.fanOutWidth.observe(len(fan.events), len(c.Units))
	return c
}

// DispatchFromOutbox fans one outbox row out in ONE transaction (see
// docs/design/outbox-transport.md, Atomic fan-out): it CAS-marks the row
// dispatched, creates its event, and creates a born-leased delivery for every
// enabled endpoint subscribed to the event type. If the CAS finds the row
// already resolved, nothing is made and it returns ErrStaleOutboxMark: a
// row yields exactly one event.
//
// It makes no HTTP attempt: its deliveries wait out their birth lease and
// are then taken by the retry worker. The outbox lane fans rows out in its
// claim and makes the first attempts right after.
func (p *Dispatcher) DispatchFromOutbox(ctx context.Context, outboxID string) (Dispatch, error) {
	if err := validateID(outboxID); err != nil {
		return Dispatch{}, err
	}
	fan, err := p.dispatch(ctx, outboxID)
	if err != nil {
		return Dispatch{}, err
	}
	if len(fan.unchecked) > 0 {
		var t Tally
		fan, t = p.checkedFanOut(ctx, fan.unchecked)
		if len(fan.events) == 0 {
			return Dispatch{}, fmt.Errorf("webhook: dispatch %s: not fanned out: %s", outboxID, strings.Join(t.Errors, "; "))
		}
	}
	return Dispatch{EventID: fan.events[0].id, Deliveries: len(fan.deliveries)}, nil
}

// dispatch fans one row out (rowFanOutSQL) in a transaction of its own; a
// row of a type with a schema is left leased in fan.unchecked, for
// checkedFanOut once the transaction has committed.
func (p *Dispatcher) dispatch(ctx context.Context, outboxID string) (fanOut, error) {
	if h := p.hooks.beforeDispatch; h != nil {
		h(outboxID)
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: %w", outboxID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	fan, err := p.fanOutRows(ctx, tx, []string{outboxID}, nil)
	if err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: %w", outboxID, err)
	}
	if len(fan.events) == 0 && len(fan.unchecked) == 0 {
		return fanOut{}, fmt.Errorf("%w (outbox row %s)", ErrStaleOutboxMark, outboxID)
	}
	if h := p.hooks.afterFanOut; h != nil {
		if err := h(outboxID); err != nil {
			return fanOut{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: commit: %w", outboxID, err)
	}
	return fan, nil
}

// fanOutWidth is how many first attempts the outbox's rows have been
// making each, lately: a claim for n free slots takes about n divided by
// that many rows, so that a claim of events to ten endpoints each does not
// take ten times the work its slots can start.
type fanOutWidth struct {
	perMille atomic.Int64 // first attempts per row ×1000; zero: none seen yet, one each
}

// rows is how many rows a claim for n attempts takes: at least one, at
// most n.
func (w *fanOutWidth) rows(n int) int {
	per := w.perMille.Load()
	if per <= 0 {
		return n
	}
	return min(max(int(int64(n)*1000/per), 1), n)
}

// observe folds a claim that made attempts first attempts of rows rows
// into the width, an eighth at a time.
func (w *fanOutWidth) observe(rows, attempts int) {
	if rows == 0 {
		return
	}
	now := int64(attempts) * 1000 / int64(rows)
	old := w.perMille.Load()
	if old <= 0 {
		w.perMille.Store(max(now, 1))
		return
	}
	w.perMille.Store(max(old+(now-old)/8, 1))
}

// outboxFailureSQL is markOutboxFailure's mark: $1 = the row's id, $2
// the error, $3 whether to retry, $4 after how long.
const outboxFailureSQL = `UPDATE webhook_outbox SET last_error = $2,
	status = CASE WHEN $3::bool THEN status ELSE 'failed' END,
	next_attempt_at = CASE WHEN $3::bool THEN now() + $4::interval ELSE next_attempt_at END
WHERE id = $1 AND status = 'pending'`

// markOutboxFailure records a failed fan-out (a database error: the
// payload is already valid jsonb) and schedules the row again, or fails it
// once outboxBackoff is spent — at once if permanent (a payload that fails
// its schema). CAS like every mark: a row a sibling resolved meanwhile is
// left alone and the mark counted stale.
func (p *Dispatcher) markOutboxFailure(ctx context.Context, row outboxRow, cause error, permanent bool) Tally {
	wait, retry := outboxBackoff.Next(row.Attempts)
	retry = retry && !permanent
	msg := pgtext.LastError(cause.Error())
	var tag pgconn.CommandTag
	_, err := claim.RetryMark(ctx, time.Now().Add(leases.MarkTimeout), func(ctx context.Context) error {
		var err error
		tag, err = p.pool.Exec(ctx, outboxFailureSQL, row.ID, msg, retry, wait)
		return err
	})
	log := p.logger.With("outbox_id", row.ID, "attempts", row.Attempts, "cause", msg)
	t := Tally{FailedIDs: []string{row.ID}}
	t.NoteError(msg)
	switch {
	case err != nil:
		t.MarkErrors++
		p.metrics.engine().MarkError(outboxTable.Name)
		log.Error("outbox fan-out failed and so did its mark; the row is retried when its lease expires", "error", err.Error())
	case tag.RowsAffected() == 0:
		t = Tally{Stale: 1}
		p.metrics.engine().Stale("webhook_outbox")
		log.Warn("stale outbox failure mark dropped: the row was resolved elsewhere")
	case retry:
		t.Retried++
		log.Warn("outbox fan-out failed; will retry", "retry_in", wait.Round(time.Second).String())
	default:
		t.Failed++
		log.Error("outbox fan-out failed for good; requeue it once the cause is fixed")
	}
	return t
}
