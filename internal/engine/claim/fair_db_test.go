package claim_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// fairEmails is email_outbox as the fair claim takes it.
var fairEmails = claim.Table{Name: "email_outbox", DueColumn: "next_attempt_at",
	Returning: "id::text, customer_id, priority", Fair: &claim.Share{Priority: "priority", Key: "email_outbox.customer_id"}}

type fairRow struct {
	ID       string
	Customer string
	Priority int16
}

// fairKey is a claimed row's key.
func fairKey(r fairRow) claim.ShareKey { return claim.ShareKey{Priority: r.Priority, Key: r.Customer} }

func claimFair(t *testing.T, db claim.DB, f *claim.Fair, n int) ([]fairRow, bool) {
	t.Helper()
	rows, _, more, err := claim.ClaimFair(context.Background(), db, fairEmails, f, n, time.Hour, claim.FairOptions{}, pgx.RowToStructByPos[fairRow], fairKey)
	if err != nil {
		t.Fatal(err)
	}
	return rows, more
}

// insertFor writes n due rows of customer at priority in one transaction:
// they share one due time, as a bulk run's rows do.
func insertFor(t *testing.T, pool *pgxpool.Pool, customer string, priority, n int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO email_outbox (customer_id, priority, payload)
SELECT $1, $2, '{"to":"a@example.com","subject":"s","text":"t"}' FROM generate_series(1, $3::int)`, customer, priority, n); err != nil {
		t.Fatal(err)
	}
}

// TestFair_RoundRobinAcrossConcurrentClaimers: customer A's 3,000-row
// backlog is claimed by three claimers at once (three replicas, each with
// its own Fair); customers B to K each write five rows after it. Every
// row is claimed once, and each of B…K's rows waits for at most a few
// claims' worth of A's rows, not for A's backlog.
func TestFair_RoundRobinAcrossConcurrentClaimers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const backlog, n, claimers = 3000, 20, 3
	insertFor(t, pool, "A", 5, backlog)
	// B…K arrive once every claimer has made A known: then their rows are
	// behind A's whole backlog in due order.
	var started sync.WaitGroup
	started.Add(claimers)
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		aBefore  = map[string]int{} // each other customer's row: A's rows claimed before it
		aAt      = map[string]int{} // each other customer: A's rows claimed when its rows were written
		customer = map[string]string{}
		aClaimed int
	)
	others := []string{"B", "C", "D", "E", "F", "G", "H", "I", "J", "K"}
	var wg sync.WaitGroup
	for range claimers {
		wg.Go(func() {
			f := &claim.Fair{}
			first := true
			// A claim finding nothing while rows are left: the other
			// claimers hold them, and their claims commit. Bounded, so
			// a lost row fails the test rather than hanging it.
			defer func() {
				if first {
					started.Done()
				}
			}()
			for empty := 0; empty < 10000; {
				rows, _, _, err := claim.ClaimFair(context.Background(), pool, fairEmails, f, n, time.Hour, claim.FairOptions{}, pgx.RowToStructByPos[fairRow], fairKey)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range rows {
					if seen[r.ID] {
						t.Errorf("row %s claimed twice", r.ID)
					}
					seen[r.ID] = true
					if r.Customer == "A" {
						aClaimed++
					} else {
						aBefore[r.ID] = aClaimed
						customer[r.ID] = r.Customer
					}
				}
				done := len(seen) == backlog+5*len(others)
				mu.Unlock()
				if first {
					started.Done()
					first = false
				}
				if done {
					return
				}
				if len(rows) == 0 {
					empty++
				}
			}
		})
	}
	started.Wait()
	for _, c := range others {
		insertFor(t, pool, c, 5, 5)
		mu.Lock()
		aAt[c] = aClaimed
		mu.Unlock()
	}
	wg.Wait()
	if len(seen) != backlog+5*len(others) {
		t.Fatalf("claimed %d of %d rows", len(seen), backlog+5*len(others))
	}
	// A's rows claimed while another's row waited: the claims under way
	// when it was written (claimers × n), then A's share of the few claims
	// it takes every claimer to meet and drain the ten customers.
	worst := 0
	for id, a := range aBefore {
		worst = max(worst, a-aAt[customer[id]])
	}
	if bound := claimers * n * 4; worst > bound {
		t.Errorf("A's rows claimed before the last of another customer's: %d, want at most %d (FIFO: about %d)", worst, bound, backlog)
	}
}

// TestFair_PriorityFirst: a high-priority row written after a backlog of
// normal ones is in the next claim, from Go's claim as from a limited one.
func TestFair_PriorityFirst(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	insertFor(t, pool, "A", 5, 500)
	f := &claim.Fair{}
	rows, more := claimFair(t, pool, f, 10)
	if len(rows) != 10 || !more {
		t.Fatalf("first claim: %d rows (more %v), want 10 with more left", len(rows), more)
	}
	insertFor(t, pool, "A", 2, 1)
	insertFor(t, pool, "B", 8, 1)
	rows, _ = claimFair(t, pool, f, 3)
	if len(rows) != 3 || rows[0].Priority != 2 && rows[1].Priority != 2 && rows[2].Priority != 2 {
		t.Fatalf("claim after a priority 2 row: %+v, want it among them", rows)
	}
	for _, r := range rows {
		if r.Priority == 8 {
			t.Errorf("claimed the priority 8 row while priority 5 rows wait: %+v", rows)
		}
	}
}

// TestFair_KnownBacklogIsNotWalkedAgain locks the fair claim's cost: once a
// backlog's customer is known, a claim reads the claim index from the
// arrival edge, past the backlog, and the share index from the customer's
// edge: a few entries each, however deep the backlog, even under a held
// snapshot after thousands of the backlog's rows were claimed.
func TestFair_KnownBacklogIsNotWalkedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	holdSnapshot(t, url)
	insertFor(t, pool, "A", 5, 6000)
	// The margin is the time a transaction may take to commit; the
	// backlog here is written at once.
	f := &claim.Fair{Margin: 20 * time.Millisecond}
	for range 30 {
		if rows, _ := claimFair(t, pool, f, 100); len(rows) != 100 {
			t.Fatalf("claimed %d of a backlog, want 100", len(rows))
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (customer_id, payload) VALUES ('B', '{"to":"a@example.com","subject":"s","text":"t"}')`); err != nil {
		t.Fatal(err)
	}
	claimOnce := func(ctx context.Context, tx pgx.Tx) error {
		rows, _, _, err := claim.ClaimFair(ctx, tx, fairEmails, f, 10, time.Hour, claim.FairOptions{}, pgx.RowToStructByPos[fairRow], fairKey)
		if err == nil && !hasCustomer(rows, "B") {
			t.Errorf("a claim of 10 from A's backlog missed B's fresh row: %+v", rows)
		}
		return err
	}
	// One claim, rolled back, measured on every index at once: run again,
	// it would start from the edges the first run moved past B's row.
	entries, pagesOf := pgtest.IndexReads(t, pool, claimOnce, "email_outbox_claim_idx", "email_outbox_fair_idx")
	arrival, share, pages := entries["email_outbox_claim_idx"], entries["email_outbox_fair_idx"], pagesOf["email_outbox_fair_idx"]
	t.Logf("one claim of 10 read %d entries of the claim index, %d of the share index in %d pages", arrival, share, pages)
	if arrival > 50 {
		t.Errorf("a claim read %d entries of the claim index past a known backlog", arrival)
	}
	if share > 100 {
		t.Errorf("a claim read %d entries of the share index for 10 rows of a known backlog", share)
	}
	// The claim's own writes of the 10 rows' new entries descend the
	// index some 20 pages' worth; a scan from A's first entry rather than
	// its edge reads the pages of the 3,000 rows claimed before, which the
	// held snapshot keeps, some 30 more.
	if pages > 36 {
		t.Errorf("a claim read %d pages of the share index for 10 rows of a known backlog: it walks the entries behind the edge", pages)
	}
}

func hasCustomer(rows []fairRow, c string) bool {
	for _, r := range rows {
		if r.Customer == c {
			return true
		}
	}
	return false
}

// TestFair_SweepLeavesKnownBacklogsAlone: the rows of a known customer's
// backlog are behind the arrival edge but in front of the customer's own,
// so the sweep (which moves what is behind every edge) moves none of them.
func TestFair_SweepLeavesKnownBacklogsAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	insertFor(t, pool, "A", 5, 300)
	// No margin: the arrival edge passes the backlog at once.
	f := &claim.Fair{Margin: time.Microsecond}
	claimFair(t, pool, f, 10)
	claimFair(t, pool, f, 10)
	if f.Known() != 1 {
		t.Fatalf("knows %d customers after claiming part of A's backlog, want 1", f.Known())
	}
	swept, err := claim.Sweep(context.Background(), pool, fairEmails, f)
	if err != nil {
		t.Fatal(err)
	}
	if swept.Rows != 0 {
		t.Errorf("the sweep moved %d rows of a known backlog", swept.Rows)
	}
	total := 20
	for {
		rows, more := claimFair(t, pool, f, 50)
		total += len(rows)
		if len(rows) == 0 && !more {
			break
		}
	}
	if total != 300 {
		t.Errorf("claimed %d of 300 rows", total)
	}
	if f.Known() != 0 {
		t.Errorf("knows %d customers after all rows were claimed", f.Known())
	}
}

// TestFair_NextClaimTakesAnotherCustomersRow: with customer A's backlog
// known, a row customer B writes is in the very next claim — one claim's
// worth of delay, not the backlog's.
//
// A claim of one row (a rate limit's one token) is the hard case: turns
// within it say nothing, so the turns must carry across claims.
func TestFair_NextClaimTakesAnotherCustomersRow(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 1} {
		t.Run(fmt.Sprintf("claims of %d", n), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			insertFor(t, pool, "A", 5, 500)
			f := &claim.Fair{}
			claimFair(t, pool, f, n)
			claimFair(t, pool, f, n)
			insertFor(t, pool, "B", 5, 1)
			if rows, _ := claimFair(t, pool, f, n); !hasCustomer(rows, "B") {
				t.Fatalf("the claim after B's row was written took only A's: %+v", rows)
			}
		})
	}
}

// TestFair_OneRowClaimsTakeTurns: two customers' backlogs, claimed one row
// at a time, alternate.
func TestFair_OneRowClaimsTakeTurns(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	insertFor(t, pool, "A", 5, 50)
	insertFor(t, pool, "C", 5, 50)
	f := &claim.Fair{}
	var got []string
	for range 12 {
		rows, _ := claimFair(t, pool, f, 1)
		if len(rows) != 1 {
			t.Fatalf("a claim of one row took %d", len(rows))
		}
		got = append(got, rows[0].Customer)
	}
	// The first claim meets A alone (its rows are due first); from the
	// next on, both are known and take turns.
	for i := 2; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("one-row claims took %v: the same customer twice running", got)
		}
	}
}

// TestFair_KeysTakenWhole: one row each of four customers, as a steady
// load's rows are claimed, as they come. A claim that takes every due row
// keeps no customer known: its next claims read no customer's edge, to
// find nothing. One that leaves rows (two, which fill the read after it)
// keeps the customers it took rows of too, since more of theirs could be
// behind what it read: their next rows wait their turn. A lane that knows
// no customer takes the first due rows (TestFair_NothingKnownTakesTheFirstDueRows);
// where it knows one, z, whose last row is among those taken, the claim is
// the fair one, and the same holds.
func TestFair_KeysTakenWhole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		zKnown              bool
		n                   int
		wantRows, wantKnown int
	}{
		{name: "every row taken", n: 8, wantRows: 4, wantKnown: 0},
		{name: "rows left", n: 2, wantRows: 2, wantKnown: 4},
		{name: "every row taken, a customer known", zKnown: true, n: 8, wantRows: 5, wantKnown: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			f := &claim.Fair{}
			if tc.zKnown {
				insertFor(t, pool, "z", 5, 2)
				if claimFair(t, pool, f, 1); f.Known() != 1 {
					t.Fatalf("a claim of one of z's two rows knows %d customers, want 1", f.Known())
				}
			}
			for _, c := range []string{"a", "b", "c", "d"} {
				insertFor(t, pool, c, 5, 1)
			}
			rows, _ := claimFair(t, pool, f, tc.n)
			if len(rows) != tc.wantRows {
				t.Fatalf("claimed %d rows, want %d", len(rows), tc.wantRows)
			}
			if got := f.Known(); got != tc.wantKnown {
				t.Errorf("after a claim of %d rows of %d the claim knows %d customers, want %d", len(rows), tc.n, got, tc.wantKnown)
			}
		})
	}
}

// TestFair_ArrivalEdgeStopsAtUnknownCustomers: one row each of 30
// customers, claimed five at a time with the arrival edge free to move to
// the present: every row is claimed, since the edge stops at the first
// row of a customer it does not know.
func TestFair_ArrivalEdgeStopsAtUnknownCustomers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for i := range 30 {
		insertFor(t, pool, fmt.Sprintf("c%02d", i), 5, 1)
	}
	f := &claim.Fair{Margin: time.Microsecond}
	claimed := 0
	for {
		rows, more := claimFair(t, pool, f, 5)
		claimed += len(rows)
		if len(rows) == 0 && !more {
			break
		}
	}
	if claimed != 30 {
		t.Errorf("claimed %d of 30 customers' rows", claimed)
	}
}

// TestFair_RowsComeInClaimOrder: ten customers' rows come back ranked —
// each customer's first row, then each one's second — so a caller that
// works them in order serves each customer in turn.
func TestFair_RowsComeInClaimOrder(t *testing.T) {
	t.Parallel()
	// A lane that knows no customer takes the first due rows and ranks
	// them itself; one that does takes them by the fair claim, ranked in
	// the statement.
	for _, known := range []bool{false, true} {
		t.Run(fmt.Sprintf("customers known %v", known), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			for i := range 10 {
				insertFor(t, pool, fmt.Sprintf("c%d", i), 5, 3)
			}
			f := &claim.Fair{}
			if known {
				claimFair(t, pool, f, 2)
				if f.Known() == 0 {
					t.Fatal("a claim of 2 rows of 30 left no customer known")
				}
			}
			rows, _ := claimFair(t, pool, f, 20)
			if len(rows) != 20 {
				t.Fatalf("claimed %d rows, want 20", len(rows))
			}
			turns := map[string]int{}
			last := 0
			for i, r := range rows {
				turns[r.Customer]++
				if turns[r.Customer] < last {
					t.Fatalf("row %d is %s's row %d after a row %d: %+v", i, r.Customer, turns[r.Customer], last, rows)
				}
				last = turns[r.Customer]
			}
		})
	}
}

// TestFair_NothingKnownTakesTheFirstDueRows: a lane that knows no
// customer (every due row is in front of its arrival edge) claims the
// first due rows by the first-come statement, which takes the rows the
// fair claim would, and hands them out in the fair claim's order. Rows
// left behind make their customers known, and the claim after is the fair
// one. Which statements ran is read from pg_prepared_statements.
func TestFair_NothingKnownTakesTheFirstDueRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ran := func() (firstCome, fair, settle int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT
			coalesce(sum(generic_plans + custom_plans) FILTER (WHERE statement LIKE 'UPDATE email_outbox SET%'), 0)::bigint,
			coalesce(sum(generic_plans + custom_plans) FILTER (WHERE statement LIKE '%picked AS MATERIALIZED%'), 0)::bigint,
			coalesce(sum(generic_plans + custom_plans) FILTER (WHERE statement LIKE '%arrived AS MATERIALIZED%'), 0)::bigint
			FROM pg_prepared_statements WHERE statement NOT LIKE '%pg_prepared_statements%'`).Scan(&firstCome, &fair, &settle); err != nil {
			t.Fatal(err)
		}
		return firstCome, fair, settle
	}
	var f claim.Fair
	insertFor(t, pool, "a", 5, 2)
	insertFor(t, pool, "b", 2, 1)
	insertFor(t, pool, "c", 5, 1)
	rows, more := claimFair(t, conn, &f, 10)
	var got []string
	for _, r := range rows {
		got = append(got, r.Customer)
	}
	// b is the most urgent; a's second row comes after every first row.
	if len(got) != 4 || got[0] != "b" || got[3] != "a" || !slices.Contains(got[1:3], "c") {
		t.Errorf("claimed customers %v, want b, then a and c in either order, then a", got)
	}
	if more || f.Known() != 0 {
		t.Errorf("a claim that took every due row reports more %v and knows %d customers, want false and 0", more, f.Known())
	}
	if firstCome, fair, settle := ran(); firstCome != 1 || fair != 0 || settle != 0 {
		t.Fatalf("a claim knowing no customer, with nothing left, ran the first-come claim %d times, the fair claim %d and the settling read %d, want 1, 0, 0", firstCome, fair, settle)
	}

	insertFor(t, pool, "a", 5, 6)
	if rows, _ := claimFair(t, conn, &f, 2); len(rows) != 2 || f.Known() != 1 {
		t.Fatalf("a claim of 2 rows of a's 6 took %d and knows %d customers, want 2 and 1", len(rows), f.Known())
	}
	if firstCome, fair, settle := ran(); firstCome != 2 || fair != 0 || settle != 1 {
		t.Fatalf("a claim knowing no customer that left rows ran the first-come claim %d times, the fair claim %d and the settling read %d, want 2, 0, 1", firstCome, fair, settle)
	}
	claimFair(t, conn, &f, 2)
	if firstCome, fair, _ := ran(); firstCome != 2 || fair != 1 {
		t.Fatalf("a claim knowing a customer ran the first-come claim %d times and the fair claim %d, want 2 and 1", firstCome, fair)
	}
}

// settleFails is a pool whose batches of the read after a fair claim go
// to a closed pool, and fail.
type settleFails struct {
	*pgxpool.Pool
	closed *pgxpool.Pool
}

func (p settleFails) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if strings.Contains(q.SQL, "arrived AS MATERIALIZED") {
			return p.closed.SendBatch(ctx, b)
		}
	}
	return p.Pool.SendBatch(ctx, b)
}

// TestFair_FirstComeRowsKeptWhenTheReadAfterFails: a first-come claim has
// committed before the read after it; when that read fails, the claimed
// rows are still the caller's (not left to wait out their lease), and the
// lane, knowing nothing more, takes the rest by its next claims.
func TestFair_FirstComeRowsKeptWhenTheReadAfterFails(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	closed, err := pgxpool.NewWithConfig(context.Background(), pool.Config())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	insertFor(t, pool, "a", 5, 3)
	var f claim.Fair
	rows, more := claimFair(t, settleFails{Pool: pool, closed: closed}, &f, 1)
	if len(rows) != 1 || !more || f.Known() != 0 {
		t.Fatalf("a first-come claim whose read after failed returned %d rows, more %v, and knows %d customers, want 1, true, 0", len(rows), more, f.Known())
	}
	if rows, _ := claimFair(t, pool, &f, 5); len(rows) != 2 {
		t.Fatalf("the next claim took %d rows, want the 2 left", len(rows))
	}
}

// TestFair_SkipsRowsLockedBySibling: a fair claim (the lane knows a
// customer) reads the rows of customers it does not know from the arrival
// edge, locking each as it reads it, and passes over those a sibling holds
// locked: it takes the rest and does not wait for the sibling.
func TestFair_SkipsRowsLockedBySibling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var f claim.Fair
	insertFor(t, pool, "a", 5, 2)
	if claimFair(t, pool, &f, 1); f.Known() != 1 {
		t.Fatalf("a claim of one of a's two rows knows %d customers, want 1", f.Known())
	}
	insertFor(t, pool, "b", 5, 3)
	insertFor(t, pool, "c", 5, 3)
	sibling, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sibling.Rollback(ctx) }()
	if _, err := sibling.Exec(ctx, `SELECT id FROM email_outbox WHERE customer_id = 'b' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	rows, _ := claimFair(t, pool, &f, 10)
	if len(rows) != 4 || hasCustomer(rows, "b") {
		t.Fatalf("a fair claim beside b's rows held by a sibling took %+v, want a's last row and c's three", rows)
	}
}

// TestFair_PlannedOnce: a connection's fair claims run on one generic plan
// of each statement, never planned again per claim (FairPlanSQL says why),
// read from pg_prepared_statements, which counts the plans Postgres made.
func TestFair_PlannedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var f claim.Fair
	for i := range 12 {
		insertFor(t, pool, fmt.Sprint("cus", i%3), 5, 5)
		claimFair(t, conn, &f, 4)
	}
	rows, err := conn.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
		WHERE (statement LIKE '%picked AS MATERIALIZED%' OR statement LIKE '%arrived AS MATERIALIZED%') AND statement NOT LIKE '%pg_prepared_statements%'`)
	if err != nil {
		t.Fatal(err)
	}
	type planned struct {
		Statement       string
		Generic, Custom int64
	}
	plans, err := pgx.CollectRows(rows, pgx.RowToStructByPos[planned])
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 2 {
		t.Fatalf("%d prepared statements of the fair claim, want the claim and its settling read", len(plans))
	}
	for _, p := range plans {
		// The first claim knows no customer and takes the first due rows
		// (ClaimFair); it leaves rows, so it settles as a fair one does.
		want := int64(11)
		if strings.Contains(p.Statement, "arrived AS MATERIALIZED") {
			want = 12
		}
		if p.Custom != 0 || p.Generic != want {
			t.Errorf("a statement of 12 claims was planned %d times for its values and ran %d times on its generic plan, want 0 and %d:\n%.80s", p.Custom, p.Generic, want, p.Statement)
		}
	}
}
