package webhook

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Three replicas claim from one tenant's 300-event backlog, enqueued
// first, and two other tenants' single events, enqueued after it: the
// fan-out takes tenants in turn, so every replica's second claim at the
// latest takes the others' events, not the backlog's 300th; and every row
// is fanned out once.
func TestFanOut_TenantsTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload, tenant_id)
		SELECT 'invoice.paid', '{}', 'acme' FROM generate_series(1, 300)`); err != nil {
		t.Fatal(err)
	}
	var late []string
	for _, tenant := range []string{"globex", "initech"} {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload, tenant_id) VALUES ('invoice.paid', '{}', $1) RETURNING id`, tenant).Scan(&id); err != nil {
			t.Fatal(err)
		}
		late = append(late, id)
	}

	const replicas, n = 3, 4
	var (
		mu   sync.Mutex
		made = map[string]int{} // outbox row → how many claims fanned it out
		in   = map[string]int{} // a late row → the claim of its replica that fanned it out (1: the first)
		wg   sync.WaitGroup
	)
	for range replicas {
		p := newDispatcher(t, pool, nil)
		claims := 0
		p.hooks.beforeDispatch = func(id string) {
			mu.Lock()
			defer mu.Unlock()
			made[id]++
			if slices.Contains(late, id) {
				in[id] = claims
			}
		}
		src := outboxSource{p}
		wg.Go(func() {
			for {
				claims++
				c, err := src.Claim(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				if c.Rows == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(made) != 302 {
		t.Fatalf("%d rows fanned out, want 302", len(made))
	}
	for id, times := range made {
		if times != 1 {
			t.Errorf("row %s fanned out by %d claims", id, times)
		}
	}
	for _, id := range late {
		// A replica's first claim meets the backlog and learns its tenant;
		// its second takes the tenants it has not served first, unless
		// another replica's claim holds them.
		if got := in[id]; got == 0 || got > 2 {
			t.Errorf("late row %s fanned out in its replica's claim %d, want the first or second (first come, first served: after 300 rows)", id, got)
		}
	}
}

// batchRecorder is a pool that records the statements of every batch
// sent through it.
type batchRecorder struct {
	*pgxpool.Pool
	mu   sync.Mutex
	sent []string
}

func (r *batchRecorder) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	r.mu.Lock()
	for _, q := range b.QueuedQueries {
		r.sent = append(r.sent, q.SQL)
	}
	r.mu.Unlock()
	return r.Pool.SendBatch(ctx, b)
}

// take is what the batches sent since the last call ran.
func (r *batchRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	r.sent = nil
	return sent
}

// TestFanOut_NothingKnownClaimsTheFirstDueRows: a fan-out lane that knows
// no share key takes the first due rows by the first-come fan-out, which
// takes the rows the fair one would (claim.ClaimFair); once rows are left
// and their keys known, the fair one.
func TestFanOut_NothingKnownClaimsTheFirstDueRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := &batchRecorder{Pool: pgtest.NewPool(t)}
	p, err := NewDispatcher(pool, Config{Settings: Settings{AllowedCIDRs: loopback}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	src := outboxSource{p}
	enqueue := func(n int) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload, tenant_id)
			SELECT 'invoice.paid', '{}', 'acme' FROM generate_series(1, $1::int)`, n); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(1)
	if c, err := src.Claim(ctx, 4); err != nil || c.Rows != 1 {
		t.Fatalf("claimed %d rows (%v), want the 1 due", c.Rows, err)
	}
	sent := pool.take()
	if first, fair := slices.Contains(sent, firstFanOutSQL), slices.Contains(sent, claimFanOutSQL); !first || fair {
		t.Fatalf("a claim knowing no key ran the first-come fan-out %v and the fair one %v, want only the first-come", first, fair)
	}
	enqueue(200)
	for range 2 {
		if _, err := src.Claim(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if p.outboxFair.Known() != 1 || !slices.Contains(pool.take(), claimFanOutSQL) {
		t.Fatalf("claims that left 200 rows of one tenant know %d keys and did not run the fair fan-out, want 1 and the fair fan-out", p.outboxFair.Known())
	}
}

// blockingReceiver is a receiver whose every request, but the first
// answerFirst, waits until release is closed, and which counts the
// requests it holds.
type blockingReceiver struct {
	*receiver
	release        chan struct{}
	answerFirst    atomic.Int32
	inFlight, peak atomic.Int32
}

func newBlockingReceiver(t *testing.T) *blockingReceiver {
	b := &blockingReceiver{release: make(chan struct{})}
	b.receiver = newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if b.answerFirst.Add(-1) >= 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		n := b.inFlight.Add(1)
		for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
		}
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
		b.inFlight.Add(-1)
		w.WriteHeader(http.StatusNoContent)
	})
	t.Cleanup(b.open)
	return b
}

func (b *blockingReceiver) open() {
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

// slowTenant is one tenant whose endpoint holds every request until the
// test lets go, and a dispatcher of 8 slots running its outbox lane.
type slowTenant struct {
	p     *Dispatcher
	slow  *blockingReceiver
	wake  chan struct{}
	stop  context.CancelFunc
	done  chan struct{}
	ctx   context.Context
	pool  DB
	tally Tally
}

const sharedSlots = 8 // WEBHOOK_CONCURRENCY of the slot-share tests: a headroom of 1

func newSlowTenant(t *testing.T) *slowTenant {
	pool := pgtest.NewPool(t)
	s := &slowTenant{pool: pool, slow: newBlockingReceiver(t), wake: make(chan struct{}, 1), done: make(chan struct{})}
	ep, err := CreateEndpoint(context.Background(), pool, Settings{}, EndpointParams{Tenant: "acme", URL: s.slow.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE webhook_endpoints SET proven_at = now() WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	s.p = newDispatcher(t, pool, func(c *Config) {
		c.Settings.Concurrency = sharedSlots
		c.Wake = s.wake
	})
	// A key shares the slots for an hour after its last: the test does
	// not depend on how fast this machine reaches each step.
	s.p.slots.SetRecent(time.Hour)
	return s
}

// run starts the outbox lane until the test ends.
func (s *slowTenant) run(t *testing.T) {
	s.ctx, s.stop = context.WithCancel(context.Background())
	go func() {
		defer close(s.done)
		s.tally, _ = s.p.Run(s.ctx, 0)
	}()
	t.Cleanup(func() {
		s.slow.open()
		s.stop()
		<-s.done
	})
}

// enqueue commits n events of tenant and wakes the lane.
func (s *slowTenant) enqueue(t *testing.T, tenant string, n int) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO webhook_outbox (event_type, payload, tenant_id)
		SELECT 'invoice.paid', '{}', $1 FROM generate_series(1, $2)`, tenant, n); err != nil {
		t.Fatal(err)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// A tenant whose endpoint holds every request fills the process's slots
// but the last (the headroom) while another tenant shares them, and the
// other's event goes out on it at once, while every slow request is still
// held; the slow one's backlog waits for its own slots.
func TestSlots_SlowEndpointLeavesTheHeadroomToOthers(t *testing.T) {
	t.Parallel()
	s := newSlowTenant(t)
	s.slow.answerFirst.Store(1) // answered: what holds it back is its share
	_, fast := tenantEndpoint(t, s.pool, "globex")
	s.run(t)
	s.enqueue(t, "globex", 1)
	eventually.Until(t, "globex's first event delivered", testWindow, func() bool { return len(fast.requests()) == 1 })

	// acme's first request is answered while its others are held: from
	// then on acme is answered, and holds slots throughout.
	s.enqueue(t, "acme", 40)
	eventually.Until(t, "acme's endpoint holding all but the headroom", testWindow, func() bool {
		return s.slow.inFlight.Load() == sharedSlots-1
	})
	s.enqueue(t, "globex", 1)
	eventually.Until(t, "globex's second event delivered while acme's requests are held", testWindow, func() bool {
		return len(fast.requests()) == 2
	})
	if peak := s.slow.peak.Load(); peak > sharedSlots-1 {
		t.Errorf("acme's endpoint held %d slots at once beside another tenant, want at most %d", peak, sharedSlots-1)
	}
	if dispatched := count(t, s.pool, `SELECT count(*) FROM webhook_outbox WHERE tenant_id = 'acme' AND status = 'dispatched'`); dispatched > 2*sharedSlots {
		t.Errorf("%d of acme's events fanned out while its endpoint held its share, want its slots' worth (at most %d)", dispatched, 2*sharedSlots)
	}
}

// An endpoint alone takes every slot once it has answered: nothing is
// kept back for tenants that do not share them.
func TestSlots_EndpointAloneUsesEverySlot(t *testing.T) {
	t.Parallel()
	s := newSlowTenant(t)
	s.slow.answerFirst.Store(1)
	s.run(t)
	s.enqueue(t, "acme", 1)
	eventually.Until(t, "acme's first event answered", testWindow, func() bool { return len(s.slow.requests()) == 1 })
	s.enqueue(t, "acme", 20)
	eventually.Until(t, "acme's endpoint holding every slot", testWindow, func() bool {
		return s.slow.inFlight.Load() == sharedSlots
	})
}

// An endpoint that has not answered yet leaves the headroom even alone:
// the first requests of a flood start together, and, holding every slot,
// would keep another tenant's event that comes a moment later waiting for
// the slowest of them. The other's event goes out while they are held.
func TestSlots_UnansweredEndpointLeavesTheHeadroom(t *testing.T) {
	t.Parallel()
	s := newSlowTenant(t)
	_, fast := tenantEndpoint(t, s.pool, "globex")
	s.run(t)
	s.enqueue(t, "acme", 40)
	eventually.Until(t, "acme's endpoint holding all but the headroom", testWindow, func() bool {
		return s.slow.inFlight.Load() == sharedSlots-1
	})
	s.enqueue(t, "globex", 1)
	eventually.Until(t, "globex's event delivered while acme's first requests are held", testWindow, func() bool {
		return len(fast.requests()) == 1
	})
	if peak := s.slow.peak.Load(); peak > sharedSlots-1 {
		t.Errorf("acme's endpoint held %d slots at once before its first answer, want at most %d", peak, sharedSlots-1)
	}
}

// The fan-out's fair claim reads each known tenant's rows from
// webhook_outbox_fair_idx (migration 00034's expression, spelled as the
// claim spells it) and no statement of it reads webhook_outbox in full,
// whose fanned-out rows are kept; with statistics taken while nothing
// was pending, as TestFairClaim_ReadsItsIndexes in outbox.
func TestFanOutClaim_ReadsItsIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload, tenant_id, status, dispatched_at)
		SELECT 'invoice.paid', '{}', 't' || (i % 50), 'dispatched', now() FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE webhook_outbox`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload, tenant_id)
		SELECT 'invoice.paid', '{}', 't' || (i % 50) FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	edge, start := time.Now().Add(-time.Minute), "00000000-0000-0000-0000-000000000000"
	priorities, tenants := []int16{0, 0}, []string{"t1", "t2"}
	edges, ids := []time.Time{edge, edge}, []string{start, start}
	tx := pgtest.BeginWith(t, pool, claim.FairPlanSQL)
	for _, limit := range []int{5, 500} {
		plans := map[string]string{
			"claim":  pgtest.Plan(t, tx, claimFanOutSQL, limit, time.Minute, edge, priorities, tenants, edges, priorities, tenants, ids, []int64{3, 0}, []int{limit, 0}, 8),
			"settle": pgtest.Plan(t, tx, outboxTable.FairSettleSQL(), edge, limit, priorities, tenants, priorities, tenants, edges, ids),
		}
		for name, plan := range plans {
			if strings.Contains(plan, "Seq Scan on webhook_outbox") || !strings.Contains(plan, "webhook_outbox_fair_idx") {
				t.Errorf("the fan-out's %s statement (limit %d) does not read a tenant's rows from webhook_outbox_fair_idx:\n%s", name, limit, plan)
			}
		}
		// A lane that knows no key reads the claim index from its edge.
		if plan := pgtest.Plan(t, tx, firstFanOutSQL, limit, time.Minute, edge, 8); strings.Contains(plan, "Seq Scan on webhook_outbox") || !strings.Contains(plan, "webhook_outbox_claim_idx") {
			t.Errorf("the first-come fan-out (limit %d) does not read webhook_outbox by its claim index:\n%s", limit, plan)
		}
	}
}

// A retry claim that has only the headroom for its slots leaves the
// deliveries of an endpoint holding its share to that endpoint's own
// slots, takes the others', and says it left rows to a crowded key.
func TestSlots_RetryClaimLeavesACrowdedEndpointsDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSlowTenant(t)
	fast, _ := tenantEndpoint(t, s.pool, "globex")
	s.enqueue(t, "acme", 3)
	s.enqueue(t, "globex", 1)
	if _, err := (outboxSource{s.p}).Claim(ctx, 10); err != nil { // born leased; their attempts are not run
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now() - interval '1 millisecond', leased_until = NULL`); err != nil {
		t.Fatal(err)
	}
	var slow string
	if err := s.pool.QueryRow(ctx, `SELECT id::text FROM webhook_endpoints WHERE tenant_id = 'acme'`).Scan(&slow); err != nil {
		t.Fatal(err)
	}
	if !s.p.slots.AcquireFor(ctx, fast.ID) {
		t.Fatal("no slot for globex")
	}
	s.p.slots.ReleaseFor(fast.ID, 0) // globex shares the slots from now on
	for range sharedSlots - 1 {
		if !s.p.slots.AcquireFor(ctx, slow) {
			t.Fatal("no slot for acme")
		}
	}
	src := retrySource{s.p}
	c, err := src.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Units) != 1 || c.Units[0].(*attemptUnit).d.endpointID != fast.ID {
		t.Fatalf("a retry claim of the headroom took %d deliveries, want globex's alone", len(c.Units))
	}
	if c, err = src.Claim(ctx, 1); err != nil || len(c.Units) != 0 || !c.Crowded {
		t.Fatalf("the next claim of the headroom: %d deliveries, crowded %v, %v; want none of acme's, crowded", len(c.Units), c.Crowded, err)
	}
	s.p.slots.ReleaseFor(slow, 0)
	if c, err = src.Claim(ctx, 2); err != nil || len(c.Units) != 2 {
		t.Fatalf("a claim beyond the headroom took %d of acme's deliveries, %v; want 2", len(c.Units), err)
	}
}
