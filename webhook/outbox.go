package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/claim"
)

// outboxTable is webhook_outbox for the shared claim: FOR UPDATE SKIP
// LOCKED, lease stamp, attempts incremented there and nowhere else.
var outboxTable = claim.Table{Name: "webhook_outbox", DueColumn: "next_attempt_at", Returning: "id, attempts"}

type outboxRow struct {
	ID       string
	Attempts int
}

// Dispatch is what DispatchFromOutbox created.
type Dispatch struct {
	EventID    string
	Deliveries int // one per enabled endpoint subscribed to the event type
}

// ProcessBatch is one claim tick of the webhook_outbox drainer: it claims
// up to leases BatchSize due rows in one short statement (lease stamp
// ClaimLease(n), FOR UPDATE SKIP LOCKED), fans each out with
// DispatchFromOutbox, and makes the first attempts of the deliveries it
// created, in process, within the Pipeline's concurrency bound. It returns
// once those attempts are recorded (or deferred to the retry worker).
//
// A River job only triggers it; the row's lease and CAS marks are what keep
// two concurrent ticks from fanning a row out twice.
func (p *Pipeline) ProcessBatch(ctx context.Context) (Summary, error) {
	r := p.newRunner()
	_, err := p.processBatch(ctx, ctx, r)
	return r.finish(ctx), err
}

// Drain runs claim ticks until the outbox has no more due rows or the
// drain window has passed, then waits for the first attempts it started.
// The tick and kick jobs call it; JobTimeout bounds it.
func (p *Pipeline) Drain(ctx context.Context) (Summary, error) {
	r := p.newRunner()
	claimCtx, cancel := context.WithTimeout(ctx, p.window)
	defer cancel()
	var err error
	for claimCtx.Err() == nil && !p.stopped.Load() {
		var n int
		if n, err = p.processBatch(claimCtx, ctx, r); err != nil || n < p.lc.BatchSize {
			break
		}
	}
	sum := r.finish(ctx)
	if err != nil && ctx.Err() == nil && claimCtx.Err() != nil {
		err = nil // the drain window closing mid-claim is the bound working, not a failure
	}
	return sum, err
}

// processBatch claims and fans out one batch. ctx bounds the claim and the
// fan-outs; attemptCtx bounds the first attempts, which outlive a drain
// window that closes while they run.
func (p *Pipeline) processBatch(ctx, attemptCtx context.Context, r *runner) (int, error) {
	if p.stopped.Load() {
		return 0, nil
	}
	n := p.lc.BatchSize
	// The chain BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease(BatchSize)
	// (leases.Validate) means every claimed row is fanned out or released
	// before its lease can expire under a sibling.
	batchCtx, cancel := context.WithTimeout(ctx, p.lc.BatchTimeout)
	defer cancel()
	rows, err := claim.Claim(batchCtx, p.pool, outboxTable, n, p.lc.ClaimLease(n), pgx.RowToStructByPos[outboxRow])
	if err != nil {
		return 0, fmt.Errorf("webhook: %w", err)
	}
	r.count(Summary{Claimed: len(rows)})
	p.metrics.claim("webhook_outbox", len(rows))

	// Each row is fanned out in its own transaction; the rows of a batch go
	// concurrently, so one slow commit does not hold up the others.
	type result struct {
		fan fanOut
		err error
	}
	results := make([]result, len(rows))
	var wg sync.WaitGroup
	for i, row := range rows {
		wg.Go(func() {
			if h := p.hooks.beforeDispatch; h != nil {
				h(row.ID)
			}
			rowCtx, cancelRow := context.WithTimeout(batchCtx, p.lc.PerRowBudget)
			defer cancelRow()
			results[i].fan, results[i].err = p.dispatch(rowCtx, row.ID)
		})
	}
	wg.Wait()

	dispatched := make([]string, 0, len(rows))
	var unstarted []outboxRow
	for i, row := range rows {
		fan, err := results[i].fan, results[i].err
		switch {
		case errors.Is(err, ErrStaleOutboxMark):
			r.count(Summary{Stale: 1})
			p.metrics.staleMark("webhook_outbox")
			p.logger.Warn("stale outbox mark: row already dispatched by a sibling; fan-out rolled back", "outbox_id", row.ID)
			continue
		case err != nil && batchCtx.Err() != nil:
			// Cut short, not failed: the transaction rolled back and nothing
			// was sent. Make it due again at once.
			unstarted = append(unstarted, row)
			continue
		case err != nil:
			p.markOutboxFailure(ctx, row, err)
			continue
		}
		dispatched = append(dispatched, row.ID)
		r.count(Summary{Dispatched: 1})
		p.metrics.eventDispatched()
		for _, d := range fan.deliveries {
			r.start(attemptCtx, batchCtx, d)
		}
	}
	if len(unstarted) > 0 {
		p.releaseOutbox(ctx, unstarted)
	}
	p.backstopDispatched(ctx, dispatched)
	return len(rows), nil
}

// DispatchFromOutbox fans one outbox row out in ONE transaction (ADR-072
// decision 4): it CAS-marks the row dispatched, creates its event, and
// creates a born-leased delivery for every enabled endpoint subscribed to
// the event type. If the CAS finds the row already resolved, it rolls back
// and returns ErrStaleOutboxMark: a row yields exactly one event
// (webhook_events.outbox_id is UNIQUE besides).
//
// It makes no HTTP attempt. ProcessBatch makes the first attempts right
// after; deliveries of a DispatchFromOutbox called alone wait out their
// birth lease and are then taken by the retry worker.
func (p *Pipeline) DispatchFromOutbox(ctx context.Context, outboxID string) (Dispatch, error) {
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
// payload makes no round trip through this process before the fan-out.
const insertEventSQL = `INSERT INTO webhook_events (event_type, payload, outbox_id)
SELECT event_type, payload, id FROM webhook_outbox WHERE id = $1
RETURNING id, event_type, payload, created_at`

type fanOut struct {
	eventID    string
	deliveries []delivery
}

func (p *Pipeline) dispatch(ctx context.Context, outboxID string) (fanOut, error) {
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
		eventID, eventType string
		payload            []byte
		createdAt          time.Time
	)
	if err := tx.QueryRow(ctx, insertEventSQL, outboxID).Scan(&eventID, &eventType, &payload, &createdAt); err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: event: %w", outboxID, err)
	}
	ev, err := newEvent(eventType, createdAt, payload)
	if err != nil {
		return fanOut{}, fmt.Errorf("webhook: dispatch %s: body: %w", outboxID, err)
	}
	ds, err := p.bornDeliveries(ctx, tx, map[string]event{eventID: ev}, "")
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

// backstopDispatched is the drainer's own success mark. The fan-out
// transaction already marked each row, so this is a CAS no-op; it exists so
// that a future change that loses the in-transaction mark leaves rows
// dispatched instead of re-fanned-out, and says so loudly.
func (p *Pipeline) backstopDispatched(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	tag, err := p.pool.Exec(ctx, `UPDATE webhook_outbox SET status = 'dispatched', dispatched_at = now()
WHERE id = ANY ($1::uuid[]) AND status = 'pending'`, ids)
	switch {
	case err != nil:
		p.logger.Error("outbox backstop mark", "rows", len(ids), "error", err.Error())
	case tag.RowsAffected() > 0:
		p.logger.Error("outbox backstop mark applied: the fan-out transaction did not mark its rows", "rows", tag.RowsAffected())
	}
}

// markOutboxFailure records a failed fan-out (a database error: the
// payload is already valid jsonb) and schedules the row again, or fails it
// once outboxSchedule is spent. CAS like every mark.
func (p *Pipeline) markOutboxFailure(ctx context.Context, row outboxRow, cause error) {
	wait, retry := outboxSchedule.Next(row.Attempts)
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	_, err := p.pool.Exec(ctx, `UPDATE webhook_outbox SET last_error = $2,
	status = CASE WHEN $3::bool THEN status ELSE 'failed' END,
	next_attempt_at = CASE WHEN $3::bool THEN now() + $4::interval ELSE next_attempt_at END
WHERE id = $1 AND status = 'pending'`, row.ID, cause.Error(), retry, wait)
	log := p.logger.With("outbox_id", row.ID, "attempts", row.Attempts, "cause", cause.Error())
	switch {
	case err != nil:
		log.Error("outbox fan-out failed and so did its mark; the row is retried when its lease expires", "error", err.Error())
	case retry:
		log.Warn("outbox fan-out failed; will retry", "retry_in", wait.Round(time.Second).String())
	default:
		log.Error("outbox fan-out failed for good; requeue it once the cause is fixed")
	}
}

func (p *Pipeline) releaseOutbox(ctx context.Context, rows []outboxRow) {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	n, err := claim.Release(ctx, p.pool, outboxTable, ids)
	p.metrics.release("webhook_outbox", int(n))
	if err != nil {
		p.logger.Warn("release unstarted outbox rows; they wait out their lease instead", "rows", len(ids), "error", err.Error())
	}
}
