package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// orderedDelivery writes an event of key and its delivery to endpoint by
// plain SQL, in the state given: status, attempts, and due in dueIn
// (negative: already due). Each call takes the next place in the order.
// It returns the delivery's id.
func orderedDelivery(t *testing.T, db DB, endpoint, key string, status string, attempts int, dueIn time.Duration) string {
	t.Helper()
	var id string
	err := db.QueryRow(context.Background(), `WITH ev AS (
	INSERT INTO webhook_events (event_type, payload, ordering_key)
	VALUES ('invoice.paid', '{}', $2) RETURNING id, ordering_seq)
INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, next_retry_at, ordering_key, ordering_seq)
SELECT ev.id, $1, $3, $4, clock_timestamp() + $5::interval, $2, ev.ordering_seq FROM ev RETURNING id`,
		endpoint, key, status, attempts, dueIn).Scan(&id)
	if err != nil {
		t.Fatalf("ordered delivery of %s: %v", key, err)
	}
	return id
}

// claimedIDs is one retry claim of up to ten deliveries, as ids.
func claimedIDs(t *testing.T, p *Dispatcher) []string {
	t.Helper()
	ds, _, err := p.claimRetries(context.Background(), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.id
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string {
	slices.Sort(ids)
	return ids
}

// The claim rules, each on its own rows: a key's later delivery is not
// claimed while an earlier one is pending — waiting, in flight, or
// waiting for a retry — and keys and endpoints do not wait for each other.
func TestOrdering_ClaimTakesOnlyTheHeadOfEachKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// head's state; second is due, of the same endpoint and key
		headStatus   string
		headAttempts int
		headDueIn    time.Duration
		wantHead     bool // the claim takes the head
		wantSecond   bool // the claim takes the second
	}{
		{"head waiting for its first attempt", "pending", 0, -time.Second, true, false},
		{"head in flight (leased)", "pending", 1, time.Minute, false, false},
		{"head waiting for a retry", "pending", 2, time.Hour, false, false},
		{"head delivered", "succeeded", 1, -time.Second, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			p := newDispatcher(t, pool, nil)
			ep := createEndpoint(t, pool, "http://127.0.0.1:9/hook")
			other := createEndpoint(t, pool, "http://127.0.0.1:9/other")
			head := orderedDelivery(t, pool, ep.ID, "cus_1", tc.headStatus, tc.headAttempts, tc.headDueIn)
			second := orderedDelivery(t, pool, ep.ID, "cus_1", "pending", 0, -time.Second)
			// Neither another key nor another endpoint waits for cus_1.
			otherKey := orderedDelivery(t, pool, ep.ID, "cus_2", "pending", 0, -time.Second)
			otherEndpoint := orderedDelivery(t, pool, other.ID, "cus_1", "pending", 0, -time.Second)
			want := []string{otherKey, otherEndpoint}
			if tc.wantHead {
				want = append(want, head)
			}
			if tc.wantSecond {
				want = append(want, second)
			}
			if got := claimedIDs(t, p); !slices.Equal(got, sorted(want...)) {
				t.Fatalf("claimed %v, want %v (head %s, second %s)", got, sorted(want...), head, second)
			}
		})
	}
}

// An earlier outbox row of the key that is not fanned out yet may have a
// delivery for the endpoint once it is: the key waits for it. One
// scheduled for later joins the order when it comes due.
func TestOrdering_EarlierOutboxRowHoldsTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		sendAt  string // the earlier row's next_attempt_at
		attempt int
		holds   bool
	}{
		{"due, not fanned out", "now()", 0, true},
		{"being fanned out (claimed)", "now() + interval '5 minutes'", 1, true},
		{"scheduled for later", "now() + interval '1 day'", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			p := newDispatcher(t, pool, nil)
			ep := createEndpoint(t, pool, "http://127.0.0.1:9/hook")
			if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload, ordering_key, attempts, next_attempt_at)
VALUES ('invoice.created', '{}', 'in_1', $1, `+tc.sendAt+`)`, tc.attempt); err != nil {
				t.Fatal(err)
			}
			later := orderedDelivery(t, pool, ep.ID, "in_1", "pending", 0, -time.Second)
			got := claimedIDs(t, p)
			if tc.holds && len(got) != 0 {
				t.Fatalf("claimed %v behind an earlier outbox row of the key, want nothing", got)
			}
			if !tc.holds && !slices.Equal(got, []string{later}) {
				t.Fatalf("claimed %v, want the delivery: a row scheduled for later does not hold the key", got)
			}
		})
	}
}

// A delivery that failed for good holds its key under the endpoint's
// 'block' policy until an operator skips it (or requeues it); under
// 'proceed' the key goes on at once.
func TestOrdering_FailedHeadBlocksOrProceeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, policy := range []string{"block", "proceed"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			p := newDispatcher(t, pool, nil)
			ep := createEndpoint(t, pool, "http://127.0.0.1:9/hook")
			if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET order_on_failure = $2 WHERE id = $1`, ep.ID, policy); err != nil {
				t.Fatal(err)
			}
			head := orderedDelivery(t, pool, ep.ID, "in_1", "failed", 16, -time.Second)
			second := orderedDelivery(t, pool, ep.ID, "in_1", "pending", 0, -time.Second)
			got := claimedIDs(t, p)
			if policy == "proceed" {
				if !slices.Equal(got, []string{second}) {
					t.Fatalf("proceed: claimed %v, want the second delivery", got)
				}
				return
			}
			if len(got) != 0 {
				t.Fatalf("block: claimed %v behind a failed head, want nothing", got)
			}
			if err := SkipOrderedHead(ctx, pool, head); err != nil {
				t.Fatal(err)
			}
			if got := claimedIDs(t, p); !slices.Equal(got, []string{second}) {
				t.Fatalf("block, head skipped: claimed %v, want the second delivery", got)
			}
		})
	}
}

// When the head resolves, the trigger makes the next delivery of its key
// due now — in front of every claim window, which had moved past it while
// it waited — so the next claim takes it without the sweep.
func TestOrdering_ResolvedHeadHandsTheKeyOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	ep := createEndpoint(t, pool, "http://127.0.0.1:9/hook")
	head := orderedDelivery(t, pool, ep.ID, "in_1", "pending", 0, -time.Minute)
	second := orderedDelivery(t, pool, ep.ID, "in_1", "pending", 0, -time.Minute)
	if got := claimedIDs(t, p); !slices.Equal(got, []string{head}) {
		t.Fatalf("claimed %v, want the head only", got)
	}
	// Nothing due: the window's edge moves up to the claim's now, past
	// the second delivery's due time.
	if got := claimedIDs(t, p); len(got) != 0 {
		t.Fatalf("second claim took %v, want nothing while the head is in flight", got)
	}
	if err := Mark(ctx, pool, head, Result{Outcome: OutcomeSent, Attempt: 1, StatusCode: 204}); err != nil {
		t.Fatal(err)
	}
	if got := claimedIDs(t, p); !slices.Equal(got, []string{second}) {
		t.Fatalf("after the head was delivered the claim took %v, want the second delivery", got)
	}
}

// The fan-out makes the first attempt of a key's first event in process
// and holds the rest (born held: no attempt, due for the retry lane),
// including the later events of the key fanned out in the same claim,
// which the statement's own check cannot see.
func TestOrdering_FanOutHoldsTheLaterEventsOfAKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select { // held until the births are checked
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	})
	createEndpoint(t, pool, rc.URL)
	ids := enqueueOrdered(t, pool, "in_1", 4)
	unordered := insertOutbox(t, pool, "invoice.paid", map[string]any{"unordered": true})
	// The key's first event is fanned out alone (born leased, its attempt
	// left to the retry pass): the next claim's events of the key wait for
	// it, not only for each other.
	if _, err := p.DispatchFromOutbox(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now(), leased_until = NULL`); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { _, err := p.Drain(ctx, testWindow); done <- err }()
	eventually.Until(t, "the fan-outs", orderingWait, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries`) == len(ids)+1
	})
	for _, id := range ids[1:] {
		d := oneDelivery(t, pool, `event_id = $1`, id)
		if d.Attempts != 0 || d.Status != "pending" {
			t.Errorf("delivery of %s: attempts %d status %s, want held (0, pending)", id, d.Attempts, d.Status)
		}
	}
	if d := oneDelivery(t, pool, `event_id = $1`, unordered); d.Attempts != 1 {
		t.Errorf("delivery of %s: attempts %d, want its first attempt made at the fan-out", unordered, d.Attempts)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := p.DrainRetries(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
	}
	if got := receivedOrder(t, rc.requests()); !slices.Equal(got["in_1"], []int{0, 1, 2, 3}) {
		t.Fatalf("receiver saw in_1 as %v, want 0, 1, 2, 3", got["in_1"])
	}
}

// A replayed event goes after what is already queued for its key; a
// requeued delivery takes its original place.
func TestOrdering_ReplayGoesLastRequeueKeepsItsPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	ep := createEndpoint(t, pool, "http://127.0.0.1:9/hook")
	first := orderedDelivery(t, pool, ep.ID, "in_1", "failed", 16, -time.Second)
	queued := orderedDelivery(t, pool, ep.ID, "in_1", "pending", 0, -time.Second)

	var firstEvent string
	if err := pool.QueryRow(ctx, `SELECT event_id FROM webhook_deliveries WHERE id = $1`, first).Scan(&firstEvent); err != nil {
		t.Fatal(err)
	}
	rep, err := p.ReplayEvent(ctx, firstEvent)
	if err != nil {
		t.Fatal(err)
	}
	var replaySeq, queuedSeq int64
	var replayKey string
	if err := pool.QueryRow(ctx, `SELECT ordering_key, ordering_seq FROM webhook_deliveries WHERE event_id = $1`, rep.EventID).Scan(&replayKey, &replaySeq); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT ordering_seq FROM webhook_deliveries WHERE id = $1`, queued).Scan(&queuedSeq); err != nil {
		t.Fatal(err)
	}
	if replayKey != "in_1" || replaySeq <= queuedSeq {
		t.Fatalf("replay: key %q place %d, want in_1 behind the queued delivery's %d", replayKey, replaySeq, queuedSeq)
	}

	// A requeue of the failed head puts it back first: the queued one
	// waits for it again.
	if err := RequeueDelivery(ctx, pool, first, "test"); err != nil {
		t.Fatal(err)
	}
	if got := claimedIDs(t, p); !slices.Equal(got, []string{first}) {
		t.Fatalf("after the requeue the claim took %v, want the requeued head alone", got)
	}
}

// The target's shape, in one process: keys × events through three
// dispatchers on one database, claiming concurrently, against a receiver
// that fails 30 % of requests at random. Every event arrives, and no
// key's events are ever accepted out of order.
func TestOrdering_ConcurrentDispatchersDeliverEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	const keys, perKey = 20, 8
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	var (
		mu       sync.Mutex
		accepted []received
		rng      = rand.New(rand.NewPCG(7, 24))
	)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < 0.3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		accepted = append(accepted, received{Body: body})
		w.WriteHeader(http.StatusNoContent)
	})
	createEndpoint(t, pool, rc.URL)
	for k := range keys {
		enqueueOrdered(t, pool, fmt.Sprintf("cus_%d", k), perKey)
	}

	schedule := make([]time.Duration, 30)
	for i := range schedule {
		schedule[i] = 10 * time.Millisecond
	}
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	for range 3 {
		p := newDispatcher(t, pool, func(c *Config) {
			c.Backoff = schedule
			c.Poll = 20 * time.Millisecond
			c.Settings.Concurrency = 8
		})
		wg.Go(func() { _, _ = p.Run(runCtx, time.Hour) })
		wg.Go(func() { _, _ = p.RunRetries(runCtx, time.Hour) })
	}
	eventually.Explain(t, "every delivery", orderingWait, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`) == keys*perKey
	}, func() string { return orderingState(t, pool) })
	stop()
	wg.Wait()

	mu.Lock()
	got := receivedOrder(t, accepted)
	mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("cus_%d", k)
		seen := got[key]
		if !slices.IsSorted(seen) {
			t.Errorf("%s accepted out of order: %v", key, seen)
		}
		if len(slices.Compact(slices.Clone(seen))) != perKey {
			t.Errorf("%s: accepted %v, want each of its %d events", key, seen, perKey)
		}
	}
}

// orderingState describes, for a failure message, the endpoints' breaker
// and every delivery not yet delivered.
func orderingState(t *testing.T, db DB) string {
	t.Helper()
	var b strings.Builder
	rows, err := db.Query(context.Background(), `SELECT format('endpoint %s enabled=%s paused_for=%s window_at=%s requests=%s failures=%s recovering=%s proven=%s',
	id, enabled, paused_until - clock_timestamp(), breaker_window_at, breaker_requests, breaker_failures, breaker_recovering, proven_at IS NOT NULL)
FROM webhook_endpoints
UNION ALL
SELECT format('outbox %s status=%s attempts=%s due_in=%s', id, status, attempts, next_attempt_at - clock_timestamp())
FROM webhook_outbox WHERE status <> 'dispatched'
UNION ALL
SELECT format('delivery %s key=%s seq=%s status=%s attempts=%s due_in=%s leased_for=%s', d.id, d.ordering_key, d.ordering_seq, d.status, d.attempts,
	d.next_retry_at - clock_timestamp(), d.leased_until - clock_timestamp())
FROM webhook_deliveries d WHERE d.status <> 'succeeded'`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err.Error()
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// enqueueOrdered enqueues n events of key through the Go API, in turn,
// each in its own transaction, and returns their ids.
func enqueueOrdered(t *testing.T, pool *pgxpool.Pool, key string, n int) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range n {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{"key": key, "n": i})
		if ids[i], err = (Enqueuer{}).EnqueueEvent(ctx, tx, Event{Type: "invoice.paid", Payload: body, OrderingKey: key}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// receivedOrder is, per key, the n of each event in got, in got's order.
func receivedOrder(t *testing.T, got []received) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, r := range got {
		var body struct {
			Data struct {
				Key string `json:"key"`
				N   int    `json:"n"`
			} `json:"data"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		out[body.Data.Key] = append(out[body.Data.Key], body.Data.N)
	}
	return out
}

// orderingWait bounds a wait for what running lanes must do: a hang, not a
// speed.
const orderingWait = 2 * time.Minute

// A delivered head hands its key on in process: the attempt that delivered
// it claims the key's next delivery into its own slot and sends it at
// once, so a hot key goes out at the receiver's pace, without the retry
// lane — here none runs: the outbox lane's drain alone delivers every
// event of the key, in order. A key whose head fails leaves the rest to
// the retry lane.
func TestOrdering_DeliveredHeadHandsItsKeyOnInProcess(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(c *Config) { c.Backoff = []time.Duration{time.Hour} })
	var coldHead atomic.Value
	coldHead.Store("")
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Header.Get(HeaderID) == coldHead.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	createEndpoint(t, pool, rc.URL)
	hot := enqueueOrdered(t, pool, "in_hot", 6)
	coldHead.Store(enqueueOrdered(t, pool, "in_cold", 2)[0])
	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if got := receivedOrder(t, rc.requests()); !slices.Equal(got["in_hot"], []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("the drain delivered in_hot as %v (%+v), want all 6 in order without a retry pass", got["in_hot"], sum)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded' AND event_id = ANY ($1::uuid[])`, hot); n != len(hot) {
		t.Fatalf("%d of %d delivered", n, len(hot))
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE ordering_key = 'in_cold' AND attempts = 0`); n != 1 {
		t.Fatalf("%d deliveries of the failing key's tail never attempted, want 1: it waits for its head's retry", n)
	}
}

// The mark that hands a key on takes the next delivery only if nothing
// else holds it: here the next event's outbox row, enqueued between the
// delivered head and the delivery after it, is not fanned out yet (another
// claim held it), so the delivery after it waits.
func TestOrdering_HandOnWaitsForAnEarlierRowNotYetFannedOut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	ids := enqueueOrdered(t, pool, "in_1", 3)
	for _, id := range []string{ids[0], ids[2]} {
		if _, err := p.DispatchFromOutbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	head := oneDelivery(t, pool, `event_id = $1`, ids[0])
	ds, err := p.loadDeliveries(ctx, []string{head.ID})
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	d.attempt, d.leaseEnd, d.leased = head.Attempts, time.Now().Add(time.Minute), true
	sum, next := p.attempt(ctx, d, trace.SpanContext{}, true)
	if sum.Sent != 1 {
		t.Fatalf("the head's attempt: %+v", sum)
	}
	if len(next) != 0 {
		t.Fatalf("the head's mark handed the key on to %s, past an earlier event not yet fanned out", next[0].id)
	}
}

// A birth that races the mark of the delivery ahead of it — each
// statement's snapshot misses the other's commit, so neither the mark's
// hand-on nor its trigger sees the birth — is taken once that mark
// commits, not left for the sweep. Here the mark is held open in a
// transaction while the outbox lane fans the next event out behind it.
func TestOrdering_BirthRacingTheMarkAheadIsTakenOnceItCommits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	provenEndpoint(t, pool, rc.URL)
	ids := enqueueOrdered(t, pool, "in_1", 2)
	if _, err := p.DispatchFromOutbox(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	head := oneDelivery(t, pool, `event_id = $1`, ids[0])
	mark, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mark.Rollback(ctx) }()
	if _, err := mark.Exec(ctx, `UPDATE webhook_deliveries SET status = 'succeeded', delivered_at = now(), leased_until = NULL WHERE id = $1`, head.ID); err != nil {
		t.Fatal(err)
	}
	drained := make(chan Tally, 1)
	var returned atomic.Bool
	go func() {
		sum, err := p.Drain(ctx, testWindow)
		if err != nil {
			t.Error(err)
		}
		returned.Store(true)
		drained <- sum
	}()
	eventually.Until(t, "the delivery born behind the racing mark", orderingWait, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1`, ids[1]) > 0
	})
	// The look again waits on the mark's row lock; the mark commits once it
	// does (or once the drain returned, when nothing looked again), after
	// the drain's claim is over: only the look again can then take the
	// delivery.
	eventually.Until(t, "the look again waiting on the mark's lock, or the drain done", orderingWait, func() bool {
		return returned.Load() ||
			count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	if err := mark.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sum := <-drained
	if got := receivedOrder(t, rc.requests()); !slices.Equal(got["in_1"], []int{1}) {
		t.Fatalf("the drain sent %v (%+v), want the event born behind the racing mark", got["in_1"], sum)
	}
	if d := oneDelivery(t, pool, `event_id = $1`, ids[1]); d.Status != string(StatusSucceeded) {
		t.Fatalf("the delivery born behind the racing mark is %s", d.Status)
	}
}

// A key's turn goes to any replica: a delivery whose turn has come — due,
// never attempted, nothing ahead of it, as the trigger leaves the next
// one when a head resolves — is claimed by the outbox lane of a replica
// that handles ordered events, with no retry pass.
func TestOrdering_AnyReplicasOutboxLaneTakesAKeysTurn(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	ep := provenEndpoint(t, pool, rc.URL)
	turn := orderedDelivery(t, pool, ep.ID, "in_turn", string(StatusPending), 0, -time.Second)
	enqueueOrdered(t, pool, "in_other", 1) // an ordered event: this replica sees ordering in use
	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if d := oneDelivery(t, pool, `id = $1`, turn); d.Status != string(StatusSucceeded) {
		t.Fatalf("the delivery whose turn had come is %s after the outbox drain (%+v)", d.Status, sum)
	}
}

// A unit that has a key's next delivery to go on with leaves its slot to
// older ordered work waiting for one in its process, and passes the key's
// turn to any replica (due now, unleased, its attempt kept) — here the
// same replica's next claim takes it — rather than keep the slot while
// older work waits.
func TestOrdering_ChainLeavesItsSlotToOlderWork(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(c *Config) { c.Settings.Concurrency = 1 })
	olderRan := make(chan time.Time, 1)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			// While the head is out, older ordered work comes to wait for
			// the one slot.
			go func() {
				if p.slots.AcquireRanked(ctx, 0) {
					olderRan <- time.Now()
					p.slots.Release(1)
				}
			}()
			if !eventually.Within(orderingWait, func() bool { return p.slots.OlderWaits(1) }) {
				t.Error("the older work never came to wait for the slot")
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	createEndpoint(t, pool, rc.URL)
	enqueueOrdered(t, pool, "in_1", 2)
	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	got := rc.requests()
	if order := receivedOrder(t, got); !slices.Equal(order["in_1"], []int{0, 1}) || sum.Released != 1 {
		t.Fatalf("sent %v (%+v), want both in order, the second after its turn was passed on", order["in_1"], sum)
	}
	if at := <-olderRan; !at.Before(got[1].At) {
		t.Fatalf("the older work got the slot %s after the key's next delivery was sent: the chain kept the slot", at.Sub(got[1].At))
	}
}

// An ordered delivery's attempt waits for a slot by its place in the
// order, oldest first (engine.Ranked); an unordered one by no rank.
func TestOrdering_AttemptIsRankedByItsPlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d        delivery
		rank     int64
		isRanked bool
	}{
		{delivery{orderingKey: "in_1", orderingSeq: 42}, 42, true},
		{delivery{}, 0, false},
	} {
		if rank, ok := (&attemptUnit{d: tc.d}).Rank(); rank != tc.rank || ok != tc.isRanked {
			t.Errorf("Rank of %+v = %d, %v; want %d, %v", tc.d, rank, ok, tc.rank, tc.isRanked)
		}
	}
}

// The mark that hands a key on reads what the next attempt needs — its
// event and endpoint — in its own statement, so a hot key costs one round
// trip per event, not two.
func TestOrdering_HandOnReadsTheNextDeliveryInTheMark(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	ep := createEndpoint(t, pool, rc.URL)
	ids := enqueueOrdered(t, pool, "in_1", 2)
	for _, id := range ids {
		if _, err := p.DispatchFromOutbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	head := oneDelivery(t, pool, `event_id = $1`, ids[0])
	ds, err := p.loadDeliveries(ctx, []string{head.ID})
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	d.attempt, d.leaseEnd, d.leased = head.Attempts, time.Now().Add(time.Minute), true
	// The second delivery was born leased by DispatchFromOutbox; give it
	// back, as its lease running out would.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = NULL, next_retry_at = now() - interval '1 second', attempts = 0 WHERE event_id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if sum, next := p.attempt(ctx, d, trace.SpanContext{}, true); len(next) != 1 || !next[0].loaded {
		t.Fatalf("the head's mark (%+v) handed on %+v, want the next delivery read in the mark", sum, next)
	} else if got := next[0].d; got.eventID != ids[1] || got.endpointID != ep.ID || got.url != rc.URL || got.orderingKey != "in_1" {
		t.Fatalf("the mark read %+v for the next delivery", got)
	}
}

// A chain sends a key's next delivery as soon as the receiver accepted
// the one before, while that one's mark is still to commit, and its marks
// go on claiming past the delivery it leased ahead: here the row of every
// delivery but the first and last is locked from its request until the
// receiver has the next one, so a mark the next request waited for would
// wait for the lock until it gives up.
func TestOrdering_ChainSendsTheNextOnceAcceptedWhileTheMarkCommits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	const events = 6
	var (
		mu     sync.Mutex
		locked = map[int]chan struct{}{} // n → closed once the receiver has n+1
		waited []int                     // the n whose lock ran out: the next request waited for its mark
	)
	p.hooks.beforeAttempt = func(deliveryID string) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT (e.payload->>'n')::int FROM webhook_deliveries d
JOIN webhook_events e ON e.id = d.event_id WHERE d.id = $1`, deliveryID).Scan(&n); err != nil {
			t.Error(err)
			return
		}
		if n == 0 || n == events-1 {
			return
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, deliveryID); err != nil {
			t.Error(err)
		}
		next := make(chan struct{})
		mu.Lock()
		locked[n] = next
		mu.Unlock()
		go func() {
			defer tx.Rollback(context.Background())
			select {
			case <-next:
			case <-time.After(10 * time.Second):
				mu.Lock()
				waited = append(waited, n)
				mu.Unlock()
			}
		}()
	}
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		var body struct {
			Data struct{ N int } `json:"data"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Error(err)
		}
		mu.Lock()
		if next, ok := locked[body.Data.N-1]; ok {
			close(next)
			delete(locked, body.Data.N-1)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	createEndpoint(t, pool, rc.URL)
	enqueueOrdered(t, pool, "in_1", events)
	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if got := receivedOrder(t, rc.requests())["in_1"]; !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("the drain delivered in_1 as %v (%+v), want all %d in order", got, sum, events)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waited) > 0 {
		t.Fatalf("the request after each of %v went out only once its mark had committed", waited)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded' AND attempts = 1`); n != events {
		t.Fatalf("%d of %d delivered at their first attempt", n, events)
	}
}

// A chain stops at a delivery the receiver did not accept: the one it
// leased ahead is not sent, and goes back to its key without the attempt
// its claim counted, so a head that fails again and again does not spend
// the attempts of what waits behind it.
func TestOrdering_RefusedDeliveryGivesTheOneLeasedAheadBackUncounted(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(c *Config) { c.Backoff = []time.Duration{time.Hour} })
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	createEndpoint(t, pool, rc.URL)
	ids := enqueueOrdered(t, pool, "in_1", 4)
	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if got := receivedOrder(t, rc.requests())["in_1"]; !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("sent %v (%+v), want 0, then 1 refused, and nothing after it", got, sum)
	}
	rows, _ := pool.Query(ctx, `SELECT d.attempts FROM webhook_deliveries d JOIN unnest($1::uuid[]) WITH ORDINALITY o(id, i) ON o.id = d.event_id ORDER BY o.i`, ids)
	attempts, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(attempts, []int{1, 1, 0, 0}) {
		t.Fatalf("attempts %v, want [1 1 0 0]: the one leased ahead of the refused delivery given back uncounted", attempts)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE leased_until IS NOT NULL`); n != 0 {
		t.Fatalf("%d deliveries still leased after the drain", n)
	}
}

// The mark that hands a key on passes over the deliveries its chain leased
// ahead only while their leases last: one whose lease ran out may be
// anyone's, and holds the key as any pending delivery does.
func TestOrdering_HandOnPassesOnlyWhatTheChainStillHolds(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	ep := createEndpoint(t, pool, rc.URL)
	for _, tc := range []struct {
		key     string
		leaseIn string // the lease of the delivery leased ahead, from now
		handsOn bool
	}{
		{"in_held", "1 minute", true},
		{"in_lapsed", "-1 second", false},
	} {
		head := orderedDelivery(t, pool, ep.ID, tc.key, "pending", 1, time.Minute)
		ahead := orderedDelivery(t, pool, ep.ID, tc.key, "pending", 1, time.Minute)
		after := orderedDelivery(t, pool, ep.ID, tc.key, "pending", 0, -time.Second)
		if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = now() + $2::interval WHERE id = $1`, ahead, tc.leaseIn); err != nil {
			t.Fatal(err)
		}
		ds, err := p.loadDeliveries(ctx, []string{head})
		if err != nil {
			t.Fatal(err)
		}
		d := ds[0]
		d.attempt, d.leaseEnd, d.leased = 1, time.Now().Add(time.Minute), true
		sum, next := p.finish(p.try(ctx, d, trace.SpanContext{}), true, []string{ahead})
		if sum.Sent != 1 {
			t.Fatalf("%s: the head's attempt: %+v", tc.key, sum)
		}
		switch {
		case tc.handsOn && (len(next) != 1 || next[0].id != after):
			t.Fatalf("%s: the mark handed on %+v, want only %s, past the one still leased ahead", tc.key, next, after)
		case !tc.handsOn && len(next) != 0:
			t.Fatalf("%s: the mark handed on %s past a delivery whose lease ran out", tc.key, next[0].id)
		}
	}
}

// A panic in a mark written while the chain's next request is out is
// recovered in that goroutine, as the lane recovers the unit's own: it is
// counted, the delivery waits out its lease with its mark lost, and the
// chain stops where that delivery holds its key.
func TestOrdering_PanicInAMarkBesideTheNextRequestIsRecovered(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	ids := enqueueOrdered(t, pool, "in_1", 4)
	const boom = "mark exploded"
	var once sync.Once
	p.hooks.beforeMark = func(id string) {
		var eventID string
		if err := pool.QueryRow(ctx, `SELECT event_id::text FROM webhook_deliveries WHERE id = $1`, id).Scan(&eventID); err != nil {
			t.Error(err)
		}
		if eventID == ids[1] {
			once.Do(func() { panic(boom) })
		}
	}
	sum, err := p.Drain(ctx, testWindow)
	if err != nil || sum.Panics != 1 || !slices.ContainsFunc(sum.Errors, func(e string) bool { return e == "panic: "+boom }) {
		t.Fatalf("drain = %+v, %v; want the mark's panic counted with its value", sum, err)
	}
	if got := receivedOrder(t, rc.requests())["in_1"]; !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("sent %v, want 0, 1 and the one leased ahead of 1, then nothing while 1 holds its key", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND status = 'pending' AND leased_until > now()`, ids[1]); n != 1 {
		t.Fatal("the delivery whose mark panicked is not pending under its lease")
	}
}
