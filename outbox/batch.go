package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
)

// batch is claimed rows that one goroutine works through in order, by a
// deadline BatchTimeout after the claim began, so the chain
// BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease holds for it exactly
// as if it had been claimed alone. It is the email lane's engine.Unit.
type batch struct {
	d        *Dispatcher
	rows     []Row
	deadline time.Time
	supp     *suppressionView

	next int // rows[:next] are attempted (their marks may be in flight) or released

	mu       sync.Mutex // guards tally and markErrs: marks finish on their own goroutines
	tally    Tally
	markErrs []error
}

// Run sends the batch's rows one after another on its connection and
// releases the rows it may not start. Each row's mark is asked for as soon
// as its send returns and runs while the next row is sent: the relay's
// time per message, not the commit's, paces the batch. Run returns once
// every mark is recorded.
func (b *batch) Run(ctx context.Context) Tally {
	d := b.d
	batchCtx, cancel := context.WithDeadline(ctx, b.deadline)
	defer cancel()
	var marks sync.WaitGroup
	defer marks.Wait()
	for b.next < len(b.rows) {
		if why := d.cannotStart(batchCtx); why != "" {
			b.release(batchCtx, why)
			break
		}
		row := &b.rows[b.next]
		if h := d.hooks.beforeRow; h != nil {
			h(row)
		}
		res, span := d.attemptRow(batchCtx, row, b.supp)
		b.next++
		// The mark is the attempt's last step: its span ends after it.
		marks.Go(func() { b.finish(trace.ContextWithSpan(ctx, span), row, res) })
	}
	marks.Wait()
	return b.snapshot()
}

// finish records one attempted row and counts it, on the mark's own
// goroutine, which no River job guards: a panic in the bookkeeping is that
// row's transient failure, recorded with the panic value.
func (b *batch) finish(ctx context.Context, row *Row, res Result) {
	defer func() {
		if v := recover(); v != nil {
			b.d.logger.Error("email mark bookkeeping panicked; recording the row as a transient failure",
				"row_id", row.ID, "panic", fmt.Sprint(v))
			b.recordPanic(ctx, row, v)
			trace.SpanFromContext(ctx).End() // the attempt's: finishRow did not reach its end
		}
	}()
	b.count(b.d.finishRow(ctx, row, res), true)
}

// recordPanic records row as a transient failure carrying the panic
// value v. If that panics too, the row keeps its lease and is claimed
// again when it expires.
func (b *batch) recordPanic(ctx context.Context, row *Row, v any) {
	defer func() {
		if v2 := recover(); v2 != nil {
			b.d.logger.Error("recording a panicked row panicked; it waits out its lease", "row_id", row.ID, "panic", fmt.Sprint(v2))
			b.mu.Lock()
			b.tally.Panics++
			b.tally.NoteError((&engine.PanicError{Value: v}).Error())
			b.mu.Unlock()
		}
	}()
	res := Result{RowID: row.ID, Kind: row.Kind, Attempt: row.Attempts, Outcome: OutcomeRetry, Err: &engine.PanicError{Value: v}}
	b.d.record(ctx, row, &res)
	b.count(res, true)
}

func (b *batch) snapshot() Tally {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tally
}

// Panicked records the row that was being worked when Run panicked as a
// transient failure carrying the panic value, and releases the rows after
// it. If the panic came after that row's mark, the retry mark is stale
// and dropped: the mark already recorded stands.
func (b *batch) Panicked(ctx context.Context, v any) Tally {
	if b.next < len(b.rows) {
		row := &b.rows[b.next]
		b.next++
		res := Result{RowID: row.ID, Kind: row.Kind, Attempt: row.Attempts, Outcome: OutcomeRetry, Err: &engine.PanicError{Value: v}}
		b.d.record(ctx, row, &res)
		b.count(res, false) // the Lane counts this panic
	}
	if b.next < len(b.rows) {
		b.release(ctx, "an earlier row of the batch panicked")
	}
	return b.snapshot()
}

// count adds one started row's recorded result (engine.Tally.Count, the
// count both transports share) and keeps its mark error for the batch;
// countPanic counts a panic its attempt recovered, so the shift reports
// it.
func (b *batch) count(row Result, countPanic bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := errors.AsType[*engine.PanicError](row.Err); ok && countPanic {
		b.tally.Panics++
	}
	b.tally.Count(row.RowID, verdicts[row.Outcome], errString(row.Err), row.Mark)
	if row.Mark != nil && !errors.Is(row.Mark, ErrStaleMark) {
		b.markErrs = append(b.markErrs, row.Mark)
	}
}

// release makes the batch's unstarted rows due again now, rather than
// leaving them to wait out a lease nobody is using.
func (b *batch) release(ctx context.Context, why string) {
	rows := b.rows[b.next:]
	b.next = len(b.rows)
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	n, err := claim.Release(ctx, b.d.db, table, ids, why, b.d.logger)
	b.d.metrics.engine().Released(table.Name, int(n))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tally.Released += int(n)
	if err != nil {
		b.markErrs = append(b.markErrs, fmt.Errorf("outbox: %w", err))
	}
}
