package outbox

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

func rowIDs(rows []Row) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids []string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// The claim takes pending, due rows oldest due first, counts the attempt and
// stamps the lease (see docs/design/outbox-transport.md, Claim and lease).
func TestClaim_StampsLeaseCountsAttemptOldestFirst(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)

	ids := insertRows(t, pool, 3)
	future := insertRow(t, pool, "raw", rawPayload("later@example.com"))
	failed := insertRow(t, pool, "raw", rawPayload("failed@example.com"))
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() + interval '1 hour' WHERE id = $1`, future); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET status = 'failed', next_attempt_at = now() - interval '1 hour' WHERE id = $1`, failed); err != nil {
		t.Fatal(err)
	}

	lease := leases.Default().ClaimLease(2)
	rows, err := Claim(ctx, pool, 2, lease)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowIDs(rows), sorted(ids[:2]); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want the two oldest due rows %v", got, want)
	}
	for _, r := range rows {
		if r.Attempts != 1 {
			t.Errorf("row %s: claim returned attempts %d, want 1", r.ID, r.Attempts)
		}
		st := getRow(t, pool, r.ID)
		if st.Attempts != 1 || st.Status != "pending" {
			t.Errorf("row %s: attempts %d status %s after claim, want 1 pending", r.ID, st.Attempts, st.Status)
		}
		if st.DueIn < lease-5*time.Second || st.DueIn > lease {
			t.Errorf("row %s: due in %s after claim, want the lease %s", r.ID, st.DueIn, lease)
		}
	}

	rows, err = Claim(ctx, pool, 10, lease)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowIDs(rows), []string{ids[2]}; !slices.Equal(got, want) {
		t.Fatalf("second claim took %v, want only the remaining due row %v (leased, future and failed rows stay)", got, want)
	}
}

// Two dispatchers race over the same 10 rows. SKIP LOCKED keeps their
// claims from waiting on each other, and the lease stamp keeps a row one
// of them claimed out of the other's next claim: every row is attempted
// and sent exactly once. The claimers send at different speeds, so the
// faster one always claims again while the slower still holds unsent
// rows: without the lease stamp those would be claimed and sent twice.
//
// Each claimer's first send waits until the other has a row too. Without
// that, a busy machine can run one goroutine through all ten rows before
// the other claims, and the race the test is about never happens.
func TestClaim_ConcurrentClaimersDisjoint(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ids := insertRows(t, pool, 10)

	const claimers = 2
	var arrived sync.WaitGroup
	arrived.Add(claimers)
	bothHoldARow := make(chan struct{})
	go func() { arrived.Wait(); close(bothHoldARow) }()
	slowSender := func(d time.Duration) *fakeSender {
		var first sync.Once
		return newFakeSender(func(ctx context.Context, _ smtp.Message) error {
			first.Do(arrived.Done)
			select {
			case <-bothHoldARow:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-time.After(d):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}
	senders := []*fakeSender{slowSender(20 * time.Millisecond), slowSender(45 * time.Millisecond)}
	results := make([]Tally, len(senders))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range senders {
		d := newDispatcher(t, pool, s, func(c *Config) { c.Concurrency = 1 })
		wg.Go(func() {
			<-start
			var err error
			results[i], err = d.Drain(ctx, 10*time.Second)
			if err != nil {
				t.Errorf("claimer %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()

	for i, r := range results {
		if r.Claimed == 0 {
			t.Errorf("claimer %d claimed nothing: the race did not happen", i)
		}
	}
	if total := results[0].Claimed + results[1].Claimed; total != len(ids) {
		t.Errorf("claimers took %d + %d rows, want %d in total", results[0].Claimed, results[1].Claimed, len(ids))
	}
	for _, id := range ids {
		calls := senders[0].callsFor(id) + senders[1].callsFor(id)
		st := getRow(t, pool, id)
		if calls != 1 || st.Attempts != 1 || st.Status != "dispatched" {
			t.Errorf("row %s: sent %d times, attempts %d, status %s; want once, 1, dispatched",
				id, calls, st.Attempts, st.Status)
		}
		if senders[0].callsFor(id) > 0 && senders[1].callsFor(id) > 0 {
			t.Errorf("row %s was sent by both claimers", id)
		}
	}
}

// A sibling transaction holds row locks on half the due rows (an application
// updating them, say). The claim must neither wait for those rows nor take
// them, and must take exactly them once the sibling ends (see
// docs/design/outbox-transport.md, Claim and lease).
func TestClaim_SkipsRowsLockedBySibling(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"commit", "rollback"} {
		t.Run("sibling "+end, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ids := insertRows(t, pool, 10)
			locked, free := ids[:5], ids[5:] // the oldest half: the claim's first choice

			sibling, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer sibling.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // ended below; this is the safety net
			if _, err := sibling.Exec(ctx, `SELECT id FROM email_outbox WHERE id = ANY($1::uuid[]) FOR UPDATE`, locked); err != nil {
				t.Fatal(err)
			}

			claimCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			rows, err := Claim(claimCtx, pool, 10, leases.Default().ClaimLease(10))
			if err != nil {
				t.Fatalf("claim with a sibling holding locks: %v (it must skip locked rows, not wait for them)", err)
			}
			if got := rowIDs(rows); !slices.Equal(got, sorted(free)) {
				t.Fatalf("claim took %v, want exactly the unlocked rows %v", got, sorted(free))
			}
			// The claimer sends what it took. Marking it here keeps this
			// test about locks alone: the lease is the race test's subject.
			for _, r := range rows {
				if err := Mark(ctx, pool, r.ID, Result{Outcome: OutcomeSent}); err != nil {
					t.Fatal(err)
				}
			}

			if end == "commit" {
				err = sibling.Commit(ctx)
			} else {
				err = sibling.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			claimCtx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			rows, err = Claim(claimCtx, pool, 10, leases.Default().ClaimLease(10))
			if err != nil {
				t.Fatal(err)
			}
			if got := rowIDs(rows); !slices.Equal(got, sorted(locked)) {
				t.Fatalf("after the sibling's %s the claim took %v, want exactly the formerly locked rows %v", end, got, sorted(locked))
			}
		})
	}
}

// deal deals a claim's rows like cards, so every batch starts with the
// claim's first rows, and its batches are rows' own array.
func TestDeal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rows, n int
		want    [][]string
	}{
		{7, 3, [][]string{{"0", "3", "6"}, {"1", "4"}, {"2", "5"}}},
		{2, 4, [][]string{{"0"}, {"1"}}},
		{3, 1, [][]string{{"0", "1", "2"}}},
	} {
		rows := make([]Row, tc.rows)
		for i := range rows {
			rows[i].ID = strconv.Itoa(i)
		}
		batches := deal(rows, tc.n)
		var got [][]string
		for _, b := range batches {
			var ids []string
			for _, r := range b {
				ids = append(ids, r.ID)
			}
			got = append(got, ids)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("deal of %d rows into %d: %v, want %v", tc.rows, tc.n, got, tc.want)
		}
		batches[0][0].Attempts = 99
		if !slices.ContainsFunc(rows, func(r Row) bool { return r.Attempts == 99 }) {
			t.Errorf("deal of %d rows into %d: a batch's row is a copy, not the claim's", tc.rows, tc.n)
		}
	}
}
