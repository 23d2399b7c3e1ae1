package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/claim"
	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/pgtext"
	"github.com/postbox/postbox/internal/tracing"
	"github.com/postbox/postbox/leases"
)

// outboxTable is webhook_outbox for the shared claim: FOR UPDATE SKIP
// LOCKED, lease stamp, attempts incremented there and nowhere else.
var outboxTable = claim.Table{Name: "webhook_outbox", DueColumn: "next_attempt_at", Returning: "id, attempts, coalesce(traceparent, '')"}

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

// RunBatch claims up to leases BatchSize due webhook_outbox rows in one
// short statement (lease stamp ClaimLease(n), FOR UPDATE SKIP LOCKED),
// fans each out with DispatchFromOutbox, and makes the first attempts of
// the deliveries it created, in process, within the Dispatcher's attempt
// slots. It returns once those attempts are recorded (or deferred to the
// retry worker).
//
// A River job only triggers it; the row's lease and CAS marks are what keep
// two concurrent runs from fanning a row out twice.
func (p *Dispatcher) RunBatch(ctx context.Context) (Tally, error) {
	n := p.fanOuts.Acquire(ctx, p.lc.BatchSize, p.lc.BatchSize)
	if n == 0 {
		return Tally{}, ctx.Err()
	}
	defer p.fanOuts.Release(n)
	c, err := p.claimOutbox(ctx, n)
	t := Tally{Claims: 1, Claimed: c.Rows}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, u := range c.Units {
		wg.Go(func() {
			o := u.Run(ctx)
			mu.Lock()
			t.Add(o)
			mu.Unlock()
		})
	}
	wg.Wait()
	return t, err
}

// Drain runs the webhook_outbox lane until the outbox has no more due rows
// or the drain window has passed, then waits for the first attempts it
// started. RunTimeout(DrainWindow) bounds it.
func (p *Dispatcher) Drain(ctx context.Context) (Tally, error) {
	return p.outboxLane.Run(ctx, engine.RunOptions{Window: p.window, UntilIdle: true})
}

// RunOutbox is one shift of the webhook_outbox lane on this replica: it
// claims whenever rows are due and fan-out slots are free — woken by
// Config.Wake, else by its poll — until window ends, ctx ends or the
// pipeline stops, then waits for what it started.
func (p *Dispatcher) RunOutbox(ctx context.Context, window time.Duration) (Tally, error) {
	return p.outboxLane.Run(ctx, engine.RunOptions{Window: window})
}

// outboxSource is webhook_outbox as the engine's Lane drains it.
type outboxSource struct{ p *Dispatcher }

func (s outboxSource) Claim(ctx context.Context, n int) (engine.Claim, error) {
	return s.p.claimOutbox(ctx, n)
}

// Sweep moves the outbox rows due behind the claim window into it.
func (s outboxSource) Sweep(ctx context.Context) (int, []string, error) {
	return sweep(ctx, s.p.pool, outboxTable, &s.p.outboxWindow)
}

func sweep(ctx context.Context, db claim.Batcher, t claim.Table, w *claim.Window) (int, []string, error) {
	s, err := claim.Sweep(ctx, db, t, w)
	if err != nil {
		err = fmt.Errorf("webhook: %w", err)
	}
	return s.Rows, s.First, err
}

// claimOutbox claims up to n due outbox rows, one fan-out unit each. The
// chain BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease(BatchSize)
// (leases.Validate) means every claimed row is fanned out or released
// before its lease can expire under a sibling, so claims are made in
// BatchSize rows at most.
func (p *Dispatcher) claimOutbox(ctx context.Context, n int) (engine.Claim, error) {
	if p.stopped.Load() {
		return engine.Claim{}, nil
	}
	n = min(n, p.lc.BatchSize)
	deadline := time.Now().Add(p.lc.BatchTimeout)
	claimCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	rows, err := claim.Claim(claimCtx, p.pool, outboxTable, &p.outboxWindow, n, p.lc.ClaimLease(p.lc.BatchSize), pgx.RowToStructByPos[outboxRow])
	if err != nil {
		return engine.Claim{}, fmt.Errorf("webhook: %w", err)
	}
	p.metrics.engine().Claimed("webhook_outbox", len(rows))
	units := make([]engine.Unit, len(rows))
	for i, row := range rows {
		units[i] = &fanOutUnit{p: p, row: row, deadline: deadline}
	}
	return engine.Claim{Units: units, Rows: len(rows), Full: len(rows) == n}, nil
}

// fanOutUnit is one claimed webhook_outbox row: its fan-out, then the first
// attempts of the deliveries it created.
type fanOutUnit struct {
	p        *Dispatcher
	row      outboxRow
	deadline time.Time // the claim's BatchTimeout: the fan-out and the attempts' queueing end by then

	dispatched bool
	runner     *runner
}

func (u *fanOutUnit) Run(ctx context.Context) Tally {
	p := u.p
	batchCtx, cancel := context.WithDeadline(ctx, u.deadline)
	defer cancel()
	if h := p.hooks.beforeDispatch; h != nil {
		h(u.row.ID)
	}
	// The fan-out's span joins the trace the event was enqueued in; the
	// first attempts are its children, and their marks theirs.
	spanCtx, opts := tracing.ForRow(batchCtx, u.row.Traceparent)
	spanCtx, span := p.tracer.Start(spanCtx, tracing.SpanWebhookFanOut, opts...)
	if span.IsRecording() {
		span.SetAttributes(tracing.RowID.String(u.row.ID), tracing.Attempt.Int(u.row.Attempts))
	}
	defer span.End()
	batchCtx = underFanOut(spanCtx)
	ctx = underFanOut(trace.ContextWithSpan(ctx, span))
	rowCtx, cancelRow := context.WithTimeout(batchCtx, p.lc.PerRowBudget)
	fan, err := p.dispatch(rowCtx, u.row.ID)
	cancelRow()
	switch {
	case !span.IsRecording():
	case err != nil:
		span.SetStatus(codes.Error, "fan-out failed")
	default:
		span.SetAttributes(tracing.EventID.String(fan.eventID), tracing.Deliveries.Int(len(fan.deliveries)))
	}
	switch {
	case errors.Is(err, ErrStaleOutboxMark):
		p.metrics.engine().Stale("webhook_outbox")
		p.logger.Warn("stale outbox mark: row already dispatched by a sibling; fan-out rolled back", "outbox_id", u.row.ID)
		return Tally{Stale: 1}
	case err != nil && batchCtx.Err() != nil:
		// Cut short, not failed: the transaction rolled back and nothing
		// was sent. Make it due again at once.
		n, _ := claim.Release(ctx, p.pool, outboxTable, []string{u.row.ID}, "fan-out cut short by the batch deadline", p.logger)
		p.metrics.engine().Released("webhook_outbox", int(n))
		return Tally{Released: int(n)}
	case err != nil:
		return p.markOutboxFailure(ctx, u.row, err)
	}
	u.dispatched = true
	p.metrics.eventDispatched()
	p.backstopDispatched(ctx, u.row.ID)
	u.runner = p.newRunner()
	for _, d := range fan.deliveries {
		u.runner.start(ctx, batchCtx, d)
	}
	t := u.runner.finish(ctx)
	t.Events++
	return t
}

// Panicked records a row whose fan-out panicked as a failed fan-out, to be
// retried on outboxSchedule. A row that was already fanned out is
// dispatched; its deliveries are born leased and the retry worker takes
// any whose first attempt did not start.
func (u *fanOutUnit) Panicked(ctx context.Context, v any) Tally {
	if !u.dispatched {
		return u.p.markOutboxFailure(ctx, u.row, &engine.PanicError{Value: v})
	}
	t := Tally{Events: 1}
	if u.runner != nil {
		t.Add(u.runner.finish(ctx))
	}
	return t
}

// DispatchFromOutbox fans one outbox row out in ONE transaction (see
// docs/design/outbox-transport.md, Atomic fan-out): it CAS-marks the row
// dispatched, creates its event, and creates a born-leased delivery for every
// enabled endpoint subscribed to the event type. If the CAS finds the row
// already resolved, it rolls back and returns ErrStaleOutboxMark: a row
// yields exactly one event (webhook_events.outbox_id is UNIQUE besides).
//
// It makes no HTTP attempt. ProcessBatch makes the first attempts right
// after; deliveries of a DispatchFromOutbox called alone wait out their
// birth lease and are then taken by the retry worker.
func (p *Dispatcher) DispatchFromOutbox(ctx context.Context, outboxID string) (Dispatch, error) {
	if err := validateID(outboxID); err != nil {
		return Dispatch{}, err
	}
	fan, err := p.dispatch(ctx, outboxID)
	if err != nil {
		return Dispatch{}, err
	}
	return Dispatch{EventID: fan.eventID, Deliveries: len(fan.deliveries)}, nil
}

// outboxDispatchedSQL is the handler-owned mark. It runs first in the
// fan-out transaction so it takes the row lock first: a racing dispatcher
// of the same row waits, then finds it dispatched and rolls back, instead of
// colliding on the event's unique outbox_id.
const outboxDispatchedSQL = `UPDATE webhook_outbox SET status = 'dispatched', dispatched_at = now(), last_error = NULL
WHERE id = $1 AND status = 'pending'`

// insertEventSQL copies the row into its event inside the database: the
// payload makes no round trip through this process before the fan-out. It
// returns the row's endpoint_id too: an event addressed to one endpoint
// (the operator notice) goes to that endpoint only.
//
// The event takes the row's own id, so the id Enqueue returns (or plain
// SQL's INSERT … RETURNING id) is the webhook-id every receiver sees. The
// primary key then refuses a second event for the row, as outbox_id's
// UNIQUE does. Events fanned out before this kept ids of their own.
const insertEventSQL = `WITH row AS (SELECT event_type, payload, id, endpoint_id, traceparent, ordering_key, ordering_seq FROM webhook_outbox WHERE id = $1),
ev AS (
	INSERT INTO webhook_events (id, event_type, payload, outbox_id, traceparent, ordering_key, ordering_seq)
	SELECT id, event_type, payload, id, traceparent, ordering_key, coalesce(ordering_seq, nextval('postbox_ordering_seq')) FROM row
	RETURNING id, event_type, payload, created_at, traceparent
)
SELECT ev.id, ev.event_type, ev.payload, ev.created_at, coalesce(row.endpoint_id::text, ''), coalesce(ev.traceparent, '') FROM ev, row`

type fanOut struct {
	eventID    string
	deliveries []delivery
}

func (p *Dispatcher) dispatch(ctx context.Context, outboxID string) (fanOut, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: %w", outboxID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	tag, err := tx.Exec(ctx, outboxDispatchedSQL, outboxID)
	if err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: mark: %w", outboxID, err)
	}
	if tag.RowsAffected() == 0 {
		return fanOut{}, fmt.Errorf("%w (outbox row %s)", ErrStaleOutboxMark, outboxID)
	}

	var (
		eventID, eventType, target, traceparent string
		payload                                 []byte
		createdAt                               time.Time
	)
	if err := tx.QueryRow(ctx, insertEventSQL, outboxID).Scan(&eventID, &eventType, &payload, &createdAt, &target, &traceparent); err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: event: %w", outboxID, err)
	}
	ev, err := newEvent(eventType, createdAt, payload, traceparent)
	if err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: body: %w", outboxID, err)
	}
	ds, err := p.bornDeliveries(ctx, tx, map[string]event{eventID: ev}, target)
	if err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: %w", outboxID, err)
	}
	if h := p.hooks.afterFanOut; h != nil {
		if err := h(outboxID); err != nil {
			return fanOut{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: commit: %w", outboxID, err)
	}
	return fanOut{eventID: eventID, deliveries: ds}, nil
}

// outboxBackstopSQL is backstopDispatched's mark: $1 = the row's id.
const outboxBackstopSQL = `UPDATE webhook_outbox SET status = 'dispatched', dispatched_at = now()
WHERE id = $1 AND status = 'pending'`

// backstopDispatched is the drainer's own success mark. The fan-out
// transaction already marked the row, so this is a CAS no-op; it exists so
// that a future change that loses the in-transaction mark leaves rows
// dispatched instead of re-fanned-out, and says so loudly.
func (p *Dispatcher) backstopDispatched(ctx context.Context, id string) {
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	tag, err := p.pool.Exec(ctx, outboxBackstopSQL, id)
	switch {
	case err != nil:
		p.logger.Error("outbox backstop mark", "outbox_id", id, "error", err.Error())
	case tag.RowsAffected() > 0:
		p.logger.Error("outbox backstop mark applied: the fan-out transaction did not mark its row", "outbox_id", id)
	}
}

// outboxFailureSQL is markOutboxFailure's mark: $1 = the row's id, $2
// the error, $3 whether to retry, $4 after how long.
const outboxFailureSQL = `UPDATE webhook_outbox SET last_error = $2,
	status = CASE WHEN $3::bool THEN status ELSE 'failed' END,
	next_attempt_at = CASE WHEN $3::bool THEN now() + $4::interval ELSE next_attempt_at END
WHERE id = $1 AND status = 'pending'`

// markOutboxFailure records a failed fan-out (a database error: the
// payload is already valid jsonb) and schedules the row again, or fails it
// once outboxSchedule is spent. CAS like every mark: a row a sibling
// resolved meanwhile is left alone and the mark counted stale.
func (p *Dispatcher) markOutboxFailure(ctx context.Context, row outboxRow, cause error) Tally {
	wait, retry := outboxSchedule.Next(row.Attempts)
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
