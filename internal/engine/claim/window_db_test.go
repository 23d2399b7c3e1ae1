package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// emails is email_outbox as these tests claim it.
var emails = claim.Table{Name: "email_outbox", DueColumn: "next_attempt_at", Returning: "id::text"}

func claimIDs(t *testing.T, db claim.DB, w *claim.Window, n int) []string {
	t.Helper()
	ids, err := claim.Claim(context.Background(), db, emails, w, n, time.Hour, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// holdSnapshot opens a REPEATABLE READ transaction on database url and
// takes its snapshot, as pg_dump or a long report does, until the test
// ends: from then on no scan can mark an index entry of that database dead
// and VACUUM removes nothing newer.
func holdSnapshot(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM email_outbox`); err != nil {
		t.Fatal(err)
	}
}

func insertDue(t *testing.T, pool *pgxpool.Pool, n int, from time.Duration) {
	t.Helper()
	// Due times spread over the first half of the time since `from` ago:
	// rows committed one after another, as an application writes them.
	if _, err := pool.Exec(context.Background(), `INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
SELECT 'cus', '{"to":"a@example.com","subject":"s","text":"t"}', now() - $2::interval + i * $2::interval / (2 * $1::int)
FROM generate_series(1, $1::int) i`, n, from); err != nil {
		t.Fatal(err)
	}
}

// TestWindow_ClaimReadsPastDeadEntriesUnderHeldSnapshot locks the claim's
// cost under a held snapshot: after 3,000 rows were claimed and sent, a
// claim from the window's edge reads a handful of the claim index's
// entries to find the one fresh row, while a claim from the start of the
// index reads every entry the sends left behind, which nothing can mark
// dead while the snapshot is held.
func TestWindow_ClaimReadsPastDeadEntriesUnderHeldSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	holdSnapshot(t, url)
	insertDue(t, pool, 3000, 10*time.Minute)
	w := &claim.Window{}
	for sent := 0; sent < 3000; {
		ids := claimIDs(t, pool, w, 100)
		if len(ids) == 0 {
			t.Fatalf("the window stopped after %d of 3000 rows", sent)
		}
		if _, err := pool.Exec(ctx, `UPDATE email_outbox SET status = 'dispatched', dispatched_at = now() WHERE id = ANY ($1::uuid[])`, ids); err != nil {
			t.Fatal(err)
		}
		sent += len(ids)
	}
	if ids := claimIDs(t, pool, w, 100); len(ids) != 0 {
		t.Fatalf("claimed %d rows after all were sent", len(ids))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (customer_id, payload) VALUES ('cus', '{"to":"a@example.com","subject":"s","text":"t"}')`); err != nil {
		t.Fatal(err)
	}

	const index = "email_outbox_claim_idx"
	// Each claim runs in a transaction that is rolled back, and must
	// find the fresh row.
	claimFrom := func(w *claim.Window) func(ctx context.Context, tx pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			ids, err := claim.Claim(ctx, tx, emails, w, 100, time.Hour, pgx.RowTo[string])
			if err == nil && len(ids) != 1 {
				err = fmt.Errorf("claimed %d fresh rows, want 1", len(ids))
			}
			return err
		}
	}
	start := pgtest.IndexEntriesRead(t, pool, index, claimFrom(nil))
	edge := pgtest.IndexEntriesRead(t, pool, index, claimFrom(w))
	if edge > 10 {
		t.Errorf("a claim from the window's edge read %d index entries for one fresh row (from the start: %d)", edge, start)
	}
	if start < 3000 {
		t.Errorf("a claim from the start read only %d index entries: the test did not leave the dead entries it is about", start)
	}
}

// TestWindow_DrainTakesEveryRowOnce drains a backlog in full claims and
// short ones through one window: every row once, none left behind.
func TestWindow_DrainTakesEveryRowOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	insertDue(t, pool, 1000, time.Minute)
	w := &claim.Window{}
	seen := map[string]bool{}
	for _, n := range []int{7, 100, 1, 250, 1000, 1000} {
		for _, id := range claimIDs(t, pool, w, n) {
			if seen[id] {
				t.Fatalf("row %s claimed twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 1000 {
		t.Fatalf("claimed %d of 1000 rows", len(seen))
	}
}

// TestSweep_MovesALateCommitIntoTheWindow: a row whose transaction began
// before the window's edge passed its due time (its default now()) and
// committed after is behind the edge; no claim takes it until the sweep
// moves it into the window, and then the next claim does.
func TestSweep_MovesALateCommitIntoTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	w := &claim.Window{Margin: 50 * time.Millisecond}

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	var id string
	if err := late.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload)
VALUES ('cus', '{"to":"a@example.com","subject":"s","text":"t"}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // simulates: time passing for the window's margin (50 ms) while the transaction stays open
	// The edge passes the row's due time.
	claimIDs(t, pool, w, 10)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := claimIDs(t, pool, w, 10); len(ids) != 0 {
		t.Fatalf("claimed %v from behind the edge", ids)
	}
	swept, err := claim.Sweep(ctx, pool, emails, w)
	if err != nil {
		t.Fatal(err)
	}
	if swept.Rows != 1 || len(swept.First) != 1 || swept.First[0] != id {
		t.Fatalf("swept %+v, want row %s", swept, id)
	}
	if ids := claimIDs(t, pool, w, 10); len(ids) != 1 || ids[0] != id {
		t.Fatalf("after the sweep the window claimed %v, want %s", ids, id)
	}
	// Swept rows are due, not claimed: the sweep does not count attempts.
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT attempts FROM email_outbox WHERE id = $1`, id).Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("attempts %d (%v), want 1: the claim's", attempts, err)
	}
}

// TestSweep_SlowerThanTheMarginStillLandsInTheWindow: under a held
// snapshot a sweep can take longer than the window's margin, while the
// claims keep moving the edge to just behind their now(); its rows, due at
// the sweep's start, would then be behind the edge again at every sweep.
// The sweep rewinds the edge to them once committed, and a claim that
// began during the sweep (here: its Advance, with a now after the sweep's)
// cannot move the edge past them.
func TestSweep_SlowerThanTheMarginStillLandsInTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	w := &claim.Window{Margin: 50 * time.Millisecond}
	claimIDs(t, pool, w, 10) // the edge: just behind now
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
VALUES ('cus', '{"to":"a@example.com","subject":"s","text":"t"}', now() - interval '1 hour') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	_, during := w.Start() // a claim under way while the sweep runs
	if swept, err := claim.Sweep(ctx, pool, emails, w); err != nil || swept.Rows != 1 {
		t.Fatalf("swept %+v, %v; want the row due in the past", swept, err)
	}
	w.Advance(during, time.Now().Add(time.Minute), time.Time{})
	if ids := claimIDs(t, pool, w, 10); len(ids) != 1 || ids[0] != id {
		t.Fatalf("after a sweep slower than the margin the window claimed %v, want %s (edge %s)", ids, id, w.Low())
	}
}

// TestClaim_CompletesOnceBegun: a claim commits before its rows reach the
// caller, so a caller whose context ends in between (a shift's window
// closing mid-claim) would strand them under their lease for minutes. The
// claim detaches from the caller's cancellation: even begun with a context
// already cancelled, it returns the rows it claimed.
func TestClaim_CompletesOnceBegun(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	insertDue(t, pool, 3, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ids, err := claim.Claim(ctx, pool, emails, &claim.Window{}, 10, time.Hour, pgx.RowTo[string])
	if err != nil || len(ids) != 3 {
		t.Fatalf("claim with its caller gone: %v, %v; want the 3 rows it claimed", ids, err)
	}
	var leased int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM email_outbox WHERE next_attempt_at > now()`).Scan(&leased); err != nil || leased != 3 {
		t.Fatalf("%d rows leased (%v), want the 3 returned", leased, err)
	}
}

// TestClaim_SkipsRowsLockedBySibling: the first-come claim (claim.Claim,
// the webhook fan-out's row-by-row fallback) passes over rows a sibling
// holds locked and takes the rest, and its window does not pass them. Without SKIP LOCKED it would wait on
// the sibling's locks until its own bound (MarkContext) ends it.
func TestClaim_SkipsRowsLockedBySibling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insertDue(t, pool, 10, time.Minute)
	sibling, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sibling.Rollback(ctx) }()
	if _, err := sibling.Exec(ctx, `SELECT id FROM email_outbox ORDER BY id LIMIT 4 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	w := &claim.Window{}
	if ids := claimIDs(t, pool, w, 10); len(ids) != 6 {
		t.Fatalf("claimed %d rows beside 4 a sibling holds, want the other 6", len(ids))
	}
	// The window's edge stopped at the first of them (due a minute ago,
	// behind the margin): released, they are the next claim's.
	if err := sibling.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := claimIDs(t, pool, w, 10); len(ids) != 4 {
		t.Fatalf("claimed %d rows once the sibling let go, want its 4", len(ids))
	}
}

// TestSweep_LeavesLeasesAndBackOffsAlone: rows in front of the edge — a
// claimed row's lease, a retry's back-off — are not the sweep's.
func TestSweep_LeavesLeasesAndBackOffsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insertDue(t, pool, 3, time.Minute)
	w := &claim.Window{}
	if ids := claimIDs(t, pool, w, 2); len(ids) != 2 { // leased for an hour
		t.Fatalf("claimed %d", len(ids))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
VALUES ('cus', '{"to":"a@example.com","subject":"s","text":"t"}', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	claimIDs(t, pool, w, 10) // takes the third
	swept, err := claim.Sweep(ctx, pool, emails, w)
	if err != nil || swept.Rows != 0 {
		t.Fatalf("swept %+v (%v), want nothing", swept, err)
	}
}

// TestClaim_ReadsByIndexWhateverThePlanCache: the claim and the sweep run
// thousands of times on one connection, so Postgres plans them once for
// all; planned on a table that has never been analyzed (a new install, a
// truncated table), a sequential scan looks cheaper than the primary key
// for the claimed ids, and would read the whole table at every claim once
// it had grown. Neither may scan the table sequentially, even under a
// generic plan made on a new table.
func TestClaim_ReadsByIndexWhateverThePlanCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
SELECT 'cus', '{"to":"a@example.com","subject":"s","text":"t"}', now() - interval '1 hour' FROM generate_series(1, 10)`); err != nil {
		t.Fatal(err)
	}
	seqScans := func() int64 {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('email_outbox'::regclass)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := seqScans()
	w := &claim.Window{}
	if _, err := claim.Claim(ctx, tx, emails, w, 5, time.Hour, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if _, err := claim.Sweep(ctx, tx, emails, w); err != nil {
		t.Fatal(err)
	}
	if n := seqScans() - before; n != 0 {
		t.Fatalf("the claim and the sweep scanned email_outbox sequentially %d times", n)
	}
}
