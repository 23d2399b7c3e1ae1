package outbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

// rowXmin is the id of the transaction that last wrote the row: rows that
// share it were committed together.
func rowXmin(t *testing.T, db DB, id string) string {
	t.Helper()
	var xmin string
	if err := db.QueryRow(context.Background(), `SELECT xmin::text FROM email_outbox WHERE id = $1`, id).Scan(&xmin); err != nil {
		t.Fatal(err)
	}
	return xmin
}

// call is one mark of a group a test commits itself.
type call struct{ *claim.Mark }

func newCall(t *testing.T, m *claim.Mark) call {
	var age time.Duration
	return call{readAge(m, &age)}
}

// commit commits calls as one group.
func commit(db DB, calls ...call) {
	group := make([]*claim.Mark, len(calls))
	for i, c := range calls {
		group[i] = c.Mark
	}
	newMarkGroups(db, 1, slog.Default()).Commit(group)
}

// A group is one commit of per-row CAS statements: every mark is applied,
// each keeps its own guard (a row already resolved reports a stale mark
// and is left alone), and the applied ones share one transaction.
func TestMarkGroups_GroupSharesOneCommitAndKeepsEachGuard(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ids := insertRows(t, pool, 4)
	if _, err := pool.Exec(context.Background(), `UPDATE email_outbox SET status = 'failed', last_error = 'by a sibling' WHERE id = $1`, ids[3]); err != nil {
		t.Fatal(err)
	}
	group := []call{
		newCall(t, dispatchedMark(ids[0], 1)),
		newCall(t, retryMark(ids[1], 1, time.Hour, errors.New("451 later"), noSeal)),
		newCall(t, failedMark(ids[2], 1, errors.New("550 no such user"), noSeal)),
		newCall(t, dispatchedMark(ids[3], 1)),
	}
	commit(pool, group...)

	for i, c := range group[:3] {
		if c.Err() != nil {
			t.Errorf("mark %d (%s): %v", i, c.Outcome, c.Err())
		}
	}
	if !errors.Is(group[3].Err(), ErrStaleMark) {
		t.Errorf("mark of the already-failed row: %v, want a stale mark", group[3].Err())
	}
	for i, want := range []string{"dispatched", "pending", "failed", "failed"} {
		if st := getRow(t, pool, ids[i]); st.Status != want {
			t.Errorf("row %d: status %s, want %s", i, st.Status, want)
		}
	}
	if st := getRow(t, pool, ids[3]); lastErr(st) != "by a sibling" {
		t.Errorf("the stale mark overwrote the sibling's record: last_error %q", lastErr(st))
	}
	x := rowXmin(t, pool, ids[0])
	for _, id := range ids[1:3] {
		if rowXmin(t, pool, id) != x {
			t.Errorf("rows of one group were committed by different transactions")
		}
	}
}

// A statement the server rejects rolls its whole group back; every other
// mark of the group must still be recorded, by running alone.
func TestMarkGroups_RejectedStatementLosesNoOtherMark(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ids := insertRows(t, pool, 3)
	bad := emailMark(ids[1], OutcomeRetry,
		// Violates the attempts >= 0 CHECK: a server-side error, as a
		// constraint or a value the column refuses would be.
		`UPDATE email_outbox SET attempts = -1 `+casGuard+` RETURNING 0::float8`, ids[1])
	group := []call{newCall(t, dispatchedMark(ids[0], 1)), newCall(t, bad), newCall(t, dispatchedMark(ids[2], 1))}
	commit(pool, group...)

	if group[1].Err() == nil || errors.Is(group[1].Err(), ErrStaleMark) {
		t.Errorf("the rejected mark reported %v, want its database error", group[1].Err())
	}
	for _, i := range []int{0, 2} {
		if group[i].Err() != nil {
			t.Errorf("mark %d: %v, want recorded despite its neighbour's error", i, group[i].Err())
		}
		if st := getRow(t, pool, ids[i]); st.Status != "dispatched" {
			t.Errorf("row %d: %s, want dispatched", i, st.Status)
		}
	}
}

// Many batches finishing at once: every mark is recorded exactly once, and
// marks that were ready together shared commits instead of taking one each.
func TestMarkGroups_ConcurrentMarksAreGrouped(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const n = 200
	ids := insertRows(t, pool, n)
	g := newMarkGroups(pool, 1, slog.Default())
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, id := range ids {
		wg.Go(func() {
			<-start
			_, errs[i] = g.mark(context.Background(), dispatchedMark(id, 1))
		})
	}
	close(start)
	wg.Wait()
	commits := map[string]bool{}
	for i, id := range ids {
		if errs[i] != nil {
			t.Errorf("mark %d: %v", i, errs[i])
		}
		if st := getRow(t, pool, id); st.Status != "dispatched" {
			t.Errorf("row %d: %s, want dispatched", i, st.Status)
		}
		commits[rowXmin(t, pool, id)] = true
	}
	if len(commits) >= n {
		t.Errorf("%d marks took %d commits: none were grouped", n, len(commits))
	}
	t.Logf("%d marks in %d commits", n, len(commits))
}

// The exported mark functions are detached from their caller too: a dead
// context does not lose the record.
func TestMarkFuncs_SurviveCallerContextDeath(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Mark(ctx, pool, id, Result{Outcome: OutcomeSent}); err != nil {
		t.Fatalf("Mark (sent) on a cancelled context: %v", err)
	}
	if st := getRow(t, pool, id); st.Status != "dispatched" {
		t.Errorf("status %s, want dispatched", st.Status)
	}
}

// A claim for several batches stamps each row with the lease of one batch
// (ClaimLease(BatchSize)), which is what each batch's sequential rows are
// bounded by; a lease sized for the whole claim would keep a crashed worker's
// rows away for far longer than the derived constants allow (see
// docs/design/outbox-transport.md, Derived constants).
func TestDrain_OneClaimForSeveralBatchesLeasesEachRowForOneBatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	const batches = 4
	ids := insertRows(t, pool, batches*leases.BatchSize)
	var once sync.Once
	seen := make(chan rowState, 1)
	sender := newFakeSender(func(_ context.Context, msg smtp.Message) error {
		once.Do(func() { seen <- getRow(t, pool, ids[len(ids)-1]) })
		return nil
	})
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Concurrency = batches })
	res, err := d.Drain(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != len(ids) {
		t.Fatalf("sent %d of %d", res.Sent, len(ids))
	}
	// One claim took all four batches; the second found nothing.
	if res.Claims != 2 {
		t.Errorf("%d claims for %d batches, want 2 (one for all, one empty)", res.Claims, batches)
	}
	st := <-seen
	want := leases.Default().ClaimLease(leases.BatchSize)
	if st.Status != "pending" || st.DueIn > want || st.DueIn < want-time.Minute {
		t.Errorf("a claimed row while its claim's first row was sent: %s, due in %s; want pending, leased for about %s",
			st.Status, st.DueIn.Round(time.Second), want)
	}
}
