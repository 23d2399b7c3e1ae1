package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/claim"
	"github.com/postbox/postbox/internal/engine"
)

// markGroups is the dispatcher's group commit for marks. A mark is still one
// row's own CAS statement, asked for the moment its send returns, on a
// detached context bounded by leases.MarkTimeout (see
// docs/design/outbox-transport.md, Detached marks); what changes is the trip
// to the database. Marks that are ready at the same moment — other batches'
// rows finishing while a commit is on the wire — go out together as one
// pipeline of their statements under one commit, instead of a round trip and
// a commit each. No mark waits for anything but the commits ahead of it: a
// writer starts at once when fewer than maxWriters are busy, and nothing is
// held back to fill a group.
//
// One commit per row was the drain's largest cost (docs/PERFORMANCE.md).
// Sharing a commit does not tie rows' fates together: a statement error
// rolls the group back and each of its marks is run again alone, so one
// bad mark cannot lose another row's record.
type markGroups struct {
	db         DB
	logger     *slog.Logger
	maxWriters int // concurrent group commits
	maxGroup   int // marks per commit

	hook func([]*markCall) // tests: before each group's commit

	mu      sync.Mutex
	queue   []*markCall
	writers int
}

// markCall is one mark waiting for its group's commit.
type markCall struct {
	markStmt
	ctx  context.Context // the caller's, detached, MarkTimeout from when the mark was asked for
	age  time.Duration
	err  error
	done chan struct{}
}

func newMarkGroups(db DB, maxWriters int, logger *slog.Logger) *markGroups {
	return &markGroups{db: db, logger: logger, maxWriters: max(maxWriters, 1), maxGroup: 64}
}

// mark runs m in the next group, and again — alone in a later group — if
// the group failed on the connection, until m.until (claim.RetryMark).
func (g *markGroups) mark(ctx context.Context, m markStmt) (age time.Duration, err error) {
	ambiguous, err := claim.RetryMark(ctx, m.deadline(), func(ctx context.Context) error {
		var err error
		age, err = g.markOnce(ctx, m)
		if err != nil && claim.Retriable(err) {
			g.logger.Warn("email mark failed on the connection; retrying", "row_id", m.id, "outcome", string(m.outcome), "error", err.Error())
		}
		return err
	})
	if ambiguous && errors.Is(err, ErrStaleMark) && landed(ctx, g.db, m) {
		return 0, nil // an earlier try committed before its answer was lost
	}
	return age, err
}

// markOnce queues m for the next group commit and waits for it. ctx is
// already the mark's detached, MarkTimeout-bounded context.
func (g *markGroups) markOnce(callCtx context.Context, m markStmt) (time.Duration, error) {
	call := &markCall{markStmt: m, ctx: callCtx, done: make(chan struct{})}

	g.mu.Lock()
	g.queue = append(g.queue, call)
	if g.writers < g.maxWriters {
		g.writers++
		go g.write()
	}
	g.mu.Unlock()
	<-call.done // bounded: a group runs under its members' earliest deadline
	return call.age, call.err
}

// write commits groups from the queue until it is empty. A writer leaves
// only when it sees the queue empty under the lock, so a call queued while
// all writers are busy is always picked up.
func (g *markGroups) write() {
	g.mu.Lock()
	for len(g.queue) > 0 {
		n := min(len(g.queue), g.maxGroup)
		group := make([]*markCall, n)
		copy(group, g.queue)
		g.queue = append(g.queue[:0], g.queue[n:]...)
		g.mu.Unlock()
		g.commitSafely(group)
		for _, c := range group {
			close(c.done)
		}
		g.mu.Lock()
	}
	g.writers--
	g.mu.Unlock()
}

// commitSafely is commit on a goroutine no River job guards: a panic in
// it is every member's mark error (their rows wait out their lease), never
// the process's end.
func (g *markGroups) commitSafely(group []*markCall) {
	defer func() {
		if v := recover(); v != nil {
			g.logger.Error("email mark group panicked; its rows wait out their lease", "marks", len(group), "panic", fmt.Sprint(v))
			for _, c := range group {
				c.age, c.err = 0, c.wrap(&engine.PanicError{Value: v})
			}
		}
	}()
	if h := g.hook; h != nil {
		h(group)
	}
	g.commit(group)
}

// commit runs a group's marks and fills in each call's result, under the
// context of the member whose MarkTimeout ends first, so no mark runs past
// its own bound.
func (g *markGroups) commit(group []*markCall) {
	ctx := group[0].ctx
	for _, c := range group[1:] {
		if earlier(c.ctx, ctx) {
			ctx = c.ctx
		}
	}
	if len(group) > 1 && g.pipeline(ctx, group) {
		return
	}
	// One mark; or the server rejected a statement and rolled the whole
	// group back, so each mark runs on its own and only the bad one
	// reports its error.
	for _, c := range group {
		c.age, c.err = c.result(g.db.QueryRow(ctx, c.sql, c.args...))
	}
}

// pipeline sends the group's statements in one round trip, committed together
// at its end (pgx sends one Sync for a batch, so the statements form one
// implicit transaction). It reports false when the server rejected a
// statement: then nothing was applied and the caller runs each mark alone.
// Any other failure — the connection or the deadline — is every call's error,
// as it would be for a single mark: nobody can say whether the commit landed,
// and an unrecorded row is sent again after its lease, which the redelivery
// semantics allow (see docs/design/outbox-transport.md, Redelivery
// semantics).
func (g *markGroups) pipeline(ctx context.Context, group []*markCall) bool {
	b := &pgx.Batch{}
	for _, c := range group {
		b.Queue(c.sql, c.args...)
	}
	br := g.db.SendBatch(ctx, b)
	var cause error // the first failure, as the database or the connection reported it
	for _, c := range group {
		c.age, c.err = c.result(br.QueryRow())
		if c.err != nil && !errors.Is(c.err, ErrStaleMark) && cause == nil {
			cause = errors.Unwrap(c.err) // result wrapped it with c's row
		}
	}
	if err := br.Close(); err != nil && cause == nil {
		cause = err
	}
	if cause == nil {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(cause, &pgErr) {
		return false
	}
	for _, c := range group {
		c.age, c.err = 0, c.wrap(cause)
	}
	return true
}

// earlier reports whether a's deadline comes before b's.
func earlier(a, b context.Context) bool {
	da, okA := a.Deadline()
	db, okB := b.Deadline()
	return okA && (!okB || da.Before(db))
}

// markWriters is how many group commits a dispatcher with concurrency
// batches keeps on the wire at once. One writer groups best — everything
// that finishes during a commit rides the next one — until a few hundred
// batches in flight, where a second or third commit in flight stops marks
// queueing behind a single fsync (docs/PERFORMANCE.md).
func markWriters(concurrency int) int { return min(max(concurrency/50, 1), 4) }

// PoolConnections is how many pool connections a Dispatcher of this
// Concurrency keeps busy at once in steady work: its lane's claim and its
// mark writers. Each batch's own reads (a suppression re-check, a release)
// are single short statements that wait for a free connection rather than
// hold one, so they are not counted; nothing in the Dispatcher holds one
// connection while it waits for a second, so a pool of any size cannot
// deadlock it.
func PoolConnections(concurrency int) int {
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	return 1 + markWriters(concurrency)
}
