package outbox

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// Concurrency is the most batches — SMTP connections, sends — in flight in
// one Dispatcher however many drains run at once: several River jobs on
// one replica share one cap.
func TestDrain_ConcurrencyCapsSendsAcrossConcurrentDrains(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	insertRows(t, pool, 60)
	var inFlight, peak atomic.Int32
	sender := newFakeSender(func(context.Context, smtp.Message) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond) // simulates: a send of a few milliseconds, long enough for drains to overlap
		return nil
	})
	const limit = 2
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Concurrency = limit })
	var wg sync.WaitGroup
	var sent atomic.Int32
	for range 4 {
		wg.Go(func() {
			for sent.Load() < 60 {
				res, err := d.Drain(ctx, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				sent.Add(int32(res.Sent))
			}
		})
	}
	wg.Wait()
	if sent.Load() != 60 {
		t.Fatalf("%d sent, want 60", sent.Load())
	}
	if p := peak.Load(); p > limit || d.Slots().Peak() > limit {
		t.Errorf("%d sends in flight at once (slots peaked at %d) under 4 drains, want at most Concurrency = %d", p, d.Slots().Peak(), limit)
	}
	if peak.Load() < limit {
		t.Errorf("peak %d: the drains never overlapped; the test proves nothing", peak.Load())
	}
}

// A row committed by a plain INSERT while a Run is up is claimed on the
// insert trigger's wake-up, not on a poll: here the poll is an hour.
func TestRun_PlainInsertWakesTheLane(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	sender := newFakeSender(nil)
	waker := engine.NewWaker(connectFunc(pool), discardLogger())
	d := newDispatcher(t, pool, sender)
	wake := waker.Subscribe(table.Name)
	// Claims only, so the lane runs no sweep (a sweep that moves a row
	// wakes the lane too), and counted, so the insert comes after the
	// first claim has found nothing.
	source := &countingSource{d: d}
	d.lane = engine.NewLane(engine.LaneConfig{
		Name: table.Name, Source: source, Slots: d.slots, Wake: wake,
		Poll: time.Hour, HotPoll: time.Hour,
	})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = waker.Listen(runCtx) }()
	select {
	case <-waker.Listening():
	case <-ctx.Done():
		t.Fatal("the waker never listened")
	}
	// The wake-up every (re)connect sends is in the channel by now:
	// drained, it cannot stand in for the insert's.
	select {
	case <-wake:
	default:
	}
	ran := make(chan Tally, 1)
	go func() {
		res, _ := d.Run(runCtx, time.Hour)
		ran <- res
	}()
	// The Run's first claim finds nothing; only a wake-up makes a second.
	eventually.Until(t, "the Run's first claim, done", laneWait, func() bool { return source.claims.Load() >= 1 && d.slots.InUse() == 0 })
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	eventually.Until(t, "the woken claim's send", laneWait, func() bool { return sender.callsFor(id) == 1 })
	d.Stop()
	if res := <-ran; res.Sent != 1 || res.Claims < 2 {
		t.Errorf("Run = %+v, want the row sent by a second, woken claim", res)
	}
}

// A mark that fails on the connection — a Postgres restart, a network blip —
// is retried until the row's lease ends, so a delivered row is recorded, not
// re-sent after its lease (see docs/design/outbox-transport.md, Detached
// marks).
func TestMark_RetriedAcrossAConnectionCut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	proxy, url := pgtest.NewProxy(t, pgtest.URL(t))
	pool := pgtest.Connect(t, url)
	ids := insertRows(t, pool, 3)
	var once sync.Once
	sender := newFakeSender(func(_ context.Context, msg smtp.Message) error {
		if msg.RowID == ids[1] {
			// Sent; now the database goes away for a while, as in a
			// restart, before the mark.
			once.Do(func() {
				proxy.Cut()
				time.AfterFunc(5*time.Second, proxy.Restore) // a 5 s restart re-sends nothing
			})
		}
		return nil
	})
	d := newDispatcher(t, pool, sender)
	res, err := d.runBatch(ctx)
	if err != nil || res.Sent != 3 || res.MarkErrors != 0 {
		t.Fatalf("runBatch = %+v, %v; want all 3 recorded as sent despite the cut", res, err)
	}
	for _, id := range ids {
		if st := getRow(t, pool, id); st.Status != "dispatched" || sender.callsFor(id) != 1 {
			t.Errorf("row %s: %s, sent %d times; want dispatched, sent once", id, st.Status, sender.callsFor(id))
		}
	}
}

// countingSource is the Dispatcher as an engine.Source that only claims,
// counting its claims.
type countingSource struct {
	d      *Dispatcher
	claims atomic.Int32
}

func (s *countingSource) Claim(ctx context.Context, n int) (engine.Claim, error) {
	defer s.claims.Add(1)
	return emailSource{s.d}.Claim(ctx, n)
}

// laneWait bounds a wait for what a running lane must do: a hang, not a
// speed.
const laneWait = time.Minute

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// connectFunc opens connections of their own to pool's database, for a
// Waker.
func connectFunc(pool *pgxpool.Pool) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	}
}

// A short claim — a few rows just committed — is dealt out one batch per
// row across the free slots, so the rows are sent side by side; a full
// claim makes batches of BatchSize.
func TestClaim_DealsRowsAcrossTheFreeSlots(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	d := newDispatcher(t, pool, newFakeSender(nil))
	size := d.leases.BatchSize
	insertRows(t, pool, 3)
	c, err := emailSource{d}.Claim(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Units) != 3 || c.Rows != 3 || c.Full {
		t.Fatalf("claim for 4 slots over 3 rows: %d units, %d rows, full %v; want 3 batches of one row", len(c.Units), c.Rows, c.Full)
	}
	insertRows(t, pool, 2*size+1)
	c, err = emailSource{d}.Claim(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Units) != 2 || c.Rows != 2*size || !c.Full {
		t.Fatalf("claim for 2 slots over a backlog: %d units, %d rows; want 2 full batches", len(c.Units), c.Rows)
	}
	for _, u := range c.Units {
		if n := len(u.(*batch).rows); n != size {
			t.Errorf("a batch of a full claim holds %d rows, want %d", n, size)
		}
	}
}

// A row whose application transaction stayed open long after it began
// (its next_attempt_at is that transaction's now()) is behind the claim
// window when it commits; the lane's sweep moves it into the window and
// it is sent, once.
func TestRun_LateCommitIsSentAfterTheSweep(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	sender := newFakeSender(nil)
	d := newDispatcher(t, pool, sender)
	d.fair.Margin = 20 * time.Millisecond
	d.lane = engine.NewLane(engine.LaneConfig{
		Name: table.Name, Source: emailSource{d}, Slots: d.slots, Poll: 10 * time.Millisecond, HotPoll: 10 * time.Millisecond,
		SweepEvery: 100 * time.Millisecond,
		SweepGate:  &engine.Gate{DB: pool, Name: table.Name + "_sweep", Owner: "test", Lease: 100 * time.Millisecond},
	})
	// Open until the lane's claims have moved the window's edge past it.
	sendLateCommit(t, pool, d, sender, func(due time.Time) {
		eventually.Until(t, "the window's edge past the row's due time", laneWait, func() bool { return d.fair.Low().After(due) })
	})
}

// The same with the shipped figures (a margin of a second, a sweep every
// 5 s): an application transaction open for 30 s before its COMMIT still
// has its email sent, once, within about one sweep interval.
func TestRun_ThirtySecondTransactionIsSent(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a transaction open for 30 s")
	}
	t.Parallel()
	pool := pgtest.NewPool(t)
	sender := newFakeSender(nil)
	sendLateCommit(t, pool, newDispatcher(t, pool, sender), sender, func(time.Time) {
		time.Sleep(30 * time.Second) // simulates: an application transaction open for 30 s
	})
}

// sendLateCommit runs d, enqueues an email in a transaction that stays
// open while hold runs (given the row's due time), commits it, and checks
// that d sends it, once.
func sendLateCommit(t *testing.T, pool *pgxpool.Pool, d *Dispatcher, sender *fakeSender, hold func(due time.Time)) {
	t.Helper()
	ctx := testCtx(t)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan Tally, 1)
	go func() {
		res, _ := d.Run(runCtx, time.Hour)
		ran <- res
	}()
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	id, err := Enqueue(ctx, late, Email{Payload: Payload{To: "ada@example.com", Subject: "Hi", Text: "Hello"}})
	if err != nil {
		t.Fatal(err)
	}
	var due time.Time
	if err := late.QueryRow(ctx, `SELECT next_attempt_at FROM email_outbox WHERE id = $1`, id).Scan(&due); err != nil {
		t.Fatal(err)
	}
	hold(due)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	eventually.Until(t, "the late commit's send", laneWait, func() bool { return sender.callsFor(id) == 1 })
	t.Logf("sent %s after its commit", time.Since(committed).Round(time.Millisecond))
	d.Stop()
	if res := <-ran; res.Sent != 1 {
		t.Errorf("Run = %+v, want the late row sent once", res)
	}
}
