package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/pgtest"
)

// TestClaim_ReadsItsPartialIndex locks the claim's query plan: it must walk
// email_outbox_claim_idx in due order and stop after the batch, not sort
// every due row per batch (which makes a drain of N rows O(N²)).
func TestClaim_ReadsItsPartialIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
		SELECT 'raw', 'cus', jsonb_build_object('to', 'u' || i || '@example.com', 'subject', 's', 'text', 't')
		FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE email_outbox`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "EXPLAIN "+table.ClaimSQL(), 5, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "email_outbox_claim_idx") || strings.Contains(plan.String(), "Sort") {
		t.Fatalf("the claim does not read email_outbox_claim_idx in order:\n%s", plan.String())
	}
}
