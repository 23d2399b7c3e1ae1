package webhook

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The two tests below pin the webhook_outbox drainer's claim (see
// docs/design/outbox-transport.md, Claim and lease), each against exactly one
// mechanism:
//
//	mutation                                  Skips…BySibling  ConcurrentClaimersDisjoint
//	delete FOR UPDATE SKIP LOCKED             red (blocks)     green
//	FOR UPDATE without SKIP LOCKED            red (blocks)     green
//	drop the lease stamp from the claim       green            red (rows attempted twice)

// insertDueRows inserts n outbox rows due one millisecond apart, oldest
// first, so the claim's ORDER BY takes them in a known order.
func insertDueRows(t *testing.T, pool *pgxpool.Pool, n int) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `INSERT INTO webhook_outbox (event_type, payload, next_attempt_at)
SELECT 'test.claim', jsonb_build_object('i', i), now() - interval '1 minute' + i * interval '1 millisecond'
FROM generate_series(1, $1) AS i
RETURNING id`, n)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// attemptLog counts, per outbox row, how often a dispatcher started on it.
type attemptLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *attemptLog) record(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[id]++
}

func (a *attemptLog) snapshot() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.n)
}

// drainUntilEmpty calls ProcessBatch until a claim comes back empty.
func drainUntilEmpty(ctx context.Context, t *testing.T, p *Dispatcher) error {
	t.Helper()
	for {
		sum, err := p.Drain(ctx, testWindow)
		if err != nil {
			return err
		}
		if sum.Claimed == 0 {
			return nil
		}
	}
}

// A sibling transaction holds row locks on half the due set. The claim must
// neither block on those rows nor take them, and must take exactly them
// once they are released.
func TestOutbox_ProcessBatch_SkipsRowsLockedBySibling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	var log attemptLog
	p.hooks.beforeDispatch = log.record

	ids := insertDueRows(t, pool, 10)
	locked, free := ids[:5], ids[5:]

	sibling, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sibling.Rollback(ctx) }()
	if _, err := sibling.Exec(ctx, `SELECT id FROM webhook_outbox WHERE id = ANY ($1::uuid[]) FOR UPDATE`, locked); err != nil {
		t.Fatal(err)
	}

	// Without SKIP LOCKED the claim waits on the sibling's locks until this
	// context expires.
	claimCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := drainUntilEmpty(claimCtx, t, p); err != nil {
		t.Fatalf("claim blocked on rows locked by a sibling: %v", err)
	}
	if got := slices.Sorted(maps.Keys(log.snapshot())); !slices.Equal(got, slices.Sorted(slices.Values(free))) {
		t.Fatalf("while the sibling held its locks the claim took %v, want exactly the unlocked %v", got, free)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = ANY ($1::uuid[]) AND status = 'pending' AND attempts = 0`, locked); n != len(locked) {
		t.Fatalf("%d of the locked rows are untouched, want all %d", n, len(locked))
	}

	if err := sibling.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	claimCtx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if err := drainUntilEmpty(claimCtx2, t, p); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	got := log.snapshot()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("row %s attempted %d times, want 1", id, got[id])
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE status = 'dispatched'`); n != 10 {
		t.Errorf("%d rows dispatched, want 10", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events`); n != 10 {
		t.Errorf("%d events, want 10", n)
	}
}

// Two dispatchers race the same 10 rows; every row is attempted exactly
// once. Each row takes tens of milliseconds, and the second dispatcher
// starts while the first is inside its batch, so a claim that does not
// stamp its lease hands the first dispatcher's rows to the second.
func TestOutbox_ProcessBatch_ConcurrentClaimersDisjoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var log attemptLog
	firstInFlight := make(chan struct{})
	var once sync.Once
	slow := func(id string) {
		log.record(id)
		once.Do(func() { close(firstInFlight) })
		time.Sleep(30 * time.Millisecond) // simulates: a row taking tens of milliseconds
	}
	a, b := newDispatcher(t, pool, nil), newDispatcher(t, pool, nil)
	a.hooks.beforeDispatch, b.hooks.beforeDispatch = slow, slow

	ids := insertDueRows(t, pool, 10)

	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- drainUntilEmpty(runCtx, t, a) }()
	go func() {
		select {
		case <-firstInFlight:
		case <-runCtx.Done():
		}
		errs <- drainUntilEmpty(runCtx, t, b)
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("dispatcher: %v", err)
		}
	}

	got := log.snapshot()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("row %s attempted %d times, want exactly 1", id, got[id])
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE status = 'dispatched' AND attempts = 1`); n != 10 {
		t.Errorf("%d rows dispatched after exactly one claim, want 10", n)
	}
	if n := count(t, pool, `SELECT count(DISTINCT outbox_id) FROM webhook_events`); n != 10 {
		t.Errorf("events for %d distinct rows, want 10", n)
	}
}

// A webhook_outbox row whose transaction committed long after it began is
// behind the outbox lane's claim window: claims pass it by until the
// sweep moves it into the window.
func TestOutbox_LateCommitIsClaimedAfterTheSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	p.outboxFair.Margin = 20 * time.Millisecond
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	if _, err := late.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{}')`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // simulates: time passing for the claim window's margin (20 ms) while the transaction stays open
	src := outboxSource{p}
	claimed := func() int {
		t.Helper()
		c, err := src.Claim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return c.Rows
	}
	claimed() // the edge passes the row's due time
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := claimed(); n != 0 {
		t.Fatalf("claimed %d rows from behind the window's edge", n)
	}
	if n, _, err := src.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("the sweep moved %d (%v), want the late row", n, err)
	}
	if n := claimed(); n != 1 {
		t.Fatalf("after the sweep claimed %d, want the late row", n)
	}
}
