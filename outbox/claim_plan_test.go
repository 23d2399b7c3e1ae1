package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestClaim_ReadsItsPartialIndex locks the claim's query plan: it must walk
// email_outbox_claim_idx in due order and stop after the batch, not sort
// every due row per batch (which makes a drain of N rows O(N²)), and it
// must find the rows it updates by primary key, not scan the table — whose
// dispatched rows are never deleted — even for a claim of many batches.
func TestClaim_ReadsItsPartialIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload, status, dispatched_at)
		SELECT 'raw', 'cus', jsonb_build_object('to', 'u' || i || '@example.com', 'subject', 's', 'text', 't'),
			CASE WHEN i <= 5000 THEN 'pending' ELSE 'dispatched' END,
			CASE WHEN i <= 5000 THEN NULL ELSE now() END
		FROM generate_series(1, 25000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE email_outbox`); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{5, 1000} {
		for _, edge := range []time.Time{{}, time.Now().Add(-time.Minute)} {
			plan := pgtest.Plan(t, pool, table.ClaimSQL(), limit, time.Minute, edge)
			if !strings.Contains(plan, "email_outbox_claim_idx") || strings.Contains(plan, "Sort") || strings.Contains(plan, "Seq Scan") {
				t.Errorf("a claim of %d rows from %s does not read email_outbox_claim_idx in order and its rows by key:\n%s", limit, edge, plan)
			}
		}
	}
}

// TestFairClaim_ReadsItsIndexes locks the fair claim's plan: each known
// customer's rows are read from email_outbox_fair_idx, the arrivals from
// email_outbox_claim_idx, and the rows it updates by primary key; no
// statement of it reads the table in full, whose sent rows are kept. The
// statistics are taken while nothing is pending (an ANALYZE between two
// backlogs), when the claim index looks empty enough to read a
// customer's backlog through it.
func TestFairClaim_ReadsItsIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload, status, dispatched_at)
		SELECT 'raw', 'cus' || (i % 50), jsonb_build_object('to', 'u' || i || '@example.com', 'subject', 's', 'text', 't'), 'dispatched', now()
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE email_outbox`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
		SELECT 'raw', 'cus' || (i % 50), jsonb_build_object('to', 'u' || i || '@example.com', 'subject', 's', 'text', 't')
		FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	edge := time.Now().Add(-time.Minute)
	priorities, customers := []int16{5, 5}, []string{"cus1", "cus2"}
	edges, ids := []time.Time{edge, edge}, []string{"00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"}
	tx := pgtest.BeginWith(t, pool, claim.FairPlanSQL)
	for _, limit := range []int{5, 1000} {
		plans := map[string]string{
			"claim":  pgtest.Plan(t, tx, table.FairClaimSQL(), limit, time.Minute, edge, priorities, customers, edges, priorities, customers, ids, []int64{3, 0}, []int{limit, limit}),
			"settle": pgtest.Plan(t, tx, table.FairSettleSQL(), edge, limit, priorities, customers, priorities, customers, edges, ids),
		}
		for name, plan := range plans {
			if strings.Contains(plan, "Seq Scan on email_outbox") {
				t.Errorf("the fair claim's %s statement (limit %d) reads email_outbox in full:\n%s", name, limit, plan)
			}
		}
		for _, name := range []string{"claim", "settle"} {
			if p := plans[name]; !strings.Contains(p, "email_outbox_fair_idx") || strings.Count(p, "email_outbox_claim_idx") > strings.Count(p, "Anti Join") {
				t.Errorf("the fair claim's %s statement (limit %d) reads a customer's rows other than from the share index:\n%s", name, limit, p)
			}
		}
		if p := plans["claim"]; !strings.Contains(p, "email_outbox_claim_idx") || !strings.Contains(p, "email_outbox_pkey") {
			t.Errorf("a fair claim of %d rows does not read its arrivals from the claim index and its rows by key:\n%s", limit, p)
		}
	}
}
