package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Limited claims take turns on their bucket: a claim that begins while
// another transaction holds the bucket (here, one that is giving it a
// token) waits for it, and then claims with what it left. A claim that
// read the bucket without waiting would see the tokens as they were
// before, and two claimers at once would each spend the same ones. The
// rate is one token in 100 s, so none comes back while the test runs.
func TestClaimFair_LimitedClaimsTakeTurnsOnTheBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insertDue(t, pool, 3, time.Minute)
	bucket := claim.Bucket{Name: "email", Rate: 0.01, Burst: 1}
	if _, err := pool.Exec(ctx, `UPDATE postbox_rate_buckets SET tokens = 0, at = clock_timestamp() WHERE name = 'email'`); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `UPDATE postbox_rate_buckets SET tokens = 1 WHERE name = 'email'`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ids []string
		err error
	}
	done := make(chan result, 1)
	go func() {
		rows, _, _, err := claim.ClaimFair(ctx, pool, fairEmails, &claim.Fair{}, 3, time.Hour, claim.FairOptions{Bucket: &bucket}, pgx.RowToStructByPos[fairRow], fairKey)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		done <- result{ids, err}
	}()
	eventually.Until(t, "the claim waiting on the held bucket", time.Minute, func() bool {
		select {
		case r := <-done:
			t.Fatalf("the claim returned %v, %v while another transaction held the bucket; want it to wait", r.ids, r.err)
		default:
		}
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'postbox_rate_buckets' AND NOT l.granted)
			OR EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid())`).
			Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.ids) != 1 {
		t.Fatalf("after the holder gave the bucket a token: %v, %v; want one row", r.ids, r.err)
	}
	var tokens float64
	if err := pool.QueryRow(ctx, `SELECT tokens FROM postbox_rate_buckets WHERE name = 'email'`).Scan(&tokens); err != nil || tokens >= 0.5 {
		t.Fatalf("the bucket holds %v tokens (%v) after the claim took its one", tokens, err)
	}
}
