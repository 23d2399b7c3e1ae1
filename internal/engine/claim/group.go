package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/leases"
)

// Group is the group commit for marks, shared by every outbox. A mark is
// still one row's own CAS statement, asked for the moment its send returns,
// on a detached context bounded by leases.MarkTimeout (see
// docs/design/outbox-transport.md, Detached marks); what changes is the trip
// to the database. Marks that are ready at the same moment — other sends
// finishing while a commit is on the wire — go out together as one pipeline
// of their statements under one commit, instead of a round trip and a
// commit each. No mark waits for anything but the commits ahead of it: a
// writer starts at once when fewer than its writers are busy, and nothing
// is held back to fill a group.
//
// One commit per row was a drain's largest cost (docs/PERFORMANCE.md).
// Sharing a commit does not tie rows' fates together: a statement error
// rolls the group back and each of its marks is run again alone, so one
// bad mark cannot lose another row's record.
type Group struct {
	db         DB
	logger     *slog.Logger
	maxWriters int // concurrent group commits
	maxGroup   int // marks per commit

	// Hook, if set, runs before each group's commit (tests: a panic there).
	Hook func([]*Mark)

	mu      sync.Mutex
	queue   []*Mark
	writers int
}

// Mark is one row's CAS mark, the one shape of every transport's: the
// statement and its arguments, and what the engine needs to run it,
// retry it and read it. A transport builds it as data (outbox/mark.go,
// webhook/mark.go); Group.Mark and MarkAlone run it.
type Mark struct {
	Table   Table  // the row's table
	ID      string // the row, for logs and Landed
	Outcome string // what the mark records (sent, retry, …), for logs

	// Lands is the status an applied mark leaves the row in; "" for a
	// mark that leaves it pending (a retry), which is never stale on its
	// own account. After a try lost on the connection, a stale answer
	// from a row that already has Lands is that try's own commit.
	Lands string

	SQL  string
	Args []any

	// Until is the last moment the mark is retried after a connection
	// error (RetryMark): the row's lease end. Zero: MarkTimeout from now.
	Until time.Time

	// Result reads the statement's row and keeps what it read for its
	// caller. It returns an error matching ErrStale when the guard matched
	// nothing (pgx.ErrNoRows), else the scan's error as it is.
	Result func(pgx.Row) error

	// Wrap names the row in any other error: the statement's, the
	// connection's, a panic's.
	Wrap func(error) error

	ctx  context.Context
	err  error
	done chan struct{}
}

// deadline is the last moment m is retried.
func (m *Mark) deadline() time.Time {
	if m.Until.IsZero() {
		return time.Now().Add(leases.MarkTimeout)
	}
	return m.Until
}

// Err is m's result once its group has committed: nil, a stale mark, or
// what failed.
func (m *Mark) Err() error { return m.err }

// NewGroup returns a Group over db keeping at most writers commits on the
// wire at once.
func NewGroup(db DB, writers int, logger *slog.Logger) *Group {
	return &Group{db: db, logger: logger, maxWriters: max(writers, 1), maxGroup: 64}
}

// Writers is how many group commits a transport with concurrency sends in
// flight keeps on the wire at once. One writer groups best — everything
// that finishes during a commit rides the next one — until a few hundred
// sends in flight, where a second or third commit in flight stops marks
// queueing behind a single fsync (docs/PERFORMANCE.md).
func Writers(concurrency int) int { return min(max(concurrency/50, 1), 4) }

// Mark runs m in the next group, and again — alone in a later group — if
// the group failed on the connection, until m.Until (retried).
func (g *Group) Mark(ctx context.Context, m *Mark) error {
	return retried(ctx, g.db, m, func(ctx context.Context) error {
		err := g.Run(ctx, m)
		if err != nil && Retriable(err) {
			g.logger.Warn("mark failed on the connection; retrying", "outbox", m.Table.Name, "row_id", m.ID, "outcome", m.Outcome, "error", err.Error())
		}
		return err
	})
}

// retried runs try with RetryMark until m's deadline. A stale answer
// after a try lost on the connection may be that try's own commit: when
// the row already has the status m writes (m.Lands), the mark stands.
func retried(ctx context.Context, db DB, m *Mark, try func(ctx context.Context) error) error {
	ambiguous, err := RetryMark(ctx, m.deadline(), try)
	if ambiguous && errors.Is(err, ErrStale) && m.Lands != "" && Landed(ctx, db, m.Table, m.ID, m.Lands) {
		return nil // an earlier try committed before its answer was lost
	}
	return err
}

// Run runs m in the next group commit and waits for it: one try, which
// Mark wraps in RetryMark. ctx is the mark's detached,
// MarkTimeout-bounded context (MarkContext); the group runs under the
// earliest deadline of its members.
func (g *Group) Run(ctx context.Context, m *Mark) error {
	m.ctx, m.err, m.done = ctx, nil, make(chan struct{})
	g.mu.Lock()
	g.queue = append(g.queue, m)
	if g.writers < g.maxWriters {
		g.writers++
		go g.write()
	}
	g.mu.Unlock()
	<-m.done
	return m.err
}

// write commits groups from the queue until it is empty. A writer leaves
// only when it sees the queue empty under the lock, so a mark queued while
// all writers are busy is always picked up.
func (g *Group) write() {
	g.mu.Lock()
	for len(g.queue) > 0 {
		n := min(len(g.queue), g.maxGroup)
		group := make([]*Mark, n)
		copy(group, g.queue)
		g.queue = append(g.queue[:0], g.queue[n:]...)
		g.mu.Unlock()
		g.commitSafely(group)
		for _, m := range group {
			close(m.done)
		}
		g.mu.Lock()
	}
	g.writers--
	g.mu.Unlock()
}

// commitSafely is Commit on a goroutine no River job guards: a panic in
// it is every member's mark error (their rows wait out their lease), never
// the process's end.
func (g *Group) commitSafely(group []*Mark) {
	defer func() {
		if v := recover(); v != nil {
			g.logger.Error("mark group panicked; its rows wait out their lease", "marks", len(group), "panic", fmt.Sprint(v))
			for _, m := range group {
				m.err = m.Wrap(fmt.Errorf("panic: %v", v))
			}
		}
	}()
	if h := g.Hook; h != nil {
		h(group)
	}
	g.Commit(group)
}

// Commit runs a group's marks and fills in each one's result (Err), under
// the context of the member whose MarkTimeout ends first, so no mark runs
// past its own bound. Run commits what it queues; a test commits a group
// of its own making, whose marks have no deadline.
func (g *Group) Commit(group []*Mark) {
	ctx := context.Background()
	for _, m := range group {
		if m.ctx != nil && (ctx == context.Background() || earlier(m.ctx, ctx)) {
			ctx = m.ctx
		}
	}
	if len(group) > 1 && g.pipeline(ctx, group) {
		return
	}
	// One mark; or the server rejected a statement and rolled the whole
	// group back, so each mark runs on its own and only the bad one
	// reports its error.
	for _, m := range group {
		m.result(g.db.QueryRow(ctx, m.SQL, m.Args...))
	}
}

// result reads m's row into m.err, naming m's row in an error that is not
// a stale mark, and returns that error as the statement reported it.
func (m *Mark) result(row pgx.Row) error {
	err := m.Result(row)
	m.err = err
	if err != nil && !errors.Is(err, ErrStale) {
		m.err = m.Wrap(err)
		return err
	}
	return nil
}

// pipeline sends the group's statements in one round trip, committed
// together at its end (pgx sends one Sync for a batch, so the statements
// form one implicit transaction). It reports false when the server rejected
// a statement: then nothing was applied and the caller runs each mark
// alone. Any other failure — the connection or the deadline — is every
// mark's error, as it would be for a single mark: nobody can say whether
// the commit landed, and an unrecorded row is sent again after its lease,
// which the redelivery semantics allow (see docs/design/outbox-transport.md,
// Redelivery semantics).
func (g *Group) pipeline(ctx context.Context, group []*Mark) bool {
	b := &pgx.Batch{}
	for _, m := range group {
		b.Queue(m.SQL, m.Args...)
	}
	br := g.db.SendBatch(ctx, b)
	var cause error // the first failure, as the database or the connection reported it
	for _, m := range group {
		if err := m.result(br.QueryRow()); err != nil && cause == nil {
			cause = err
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
	for _, m := range group {
		m.err = m.Wrap(cause)
	}
	return true
}

// earlier reports whether a's deadline comes before b's.
func earlier(a, b context.Context) bool {
	da, okA := a.Deadline()
	db, okB := b.Deadline()
	return okA && (!okB || da.Before(db))
}
