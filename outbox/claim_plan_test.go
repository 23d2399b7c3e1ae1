package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

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
