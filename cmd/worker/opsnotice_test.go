package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// OPS_EMAIL's notice is one email_outbox row in the disabling transaction;
// a retried disable of the same failing run writes no second one.
func TestOpsEmailNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if opsEmailNotice("", nil) != nil {
		t.Fatal("no OPS_EMAIL, yet a notice")
	}
	notify := opsEmailNotice("ops@example.com", nil)
	d := webhook.EndpointDisabled{EndpointID: "0b7c6a52-8d0e-4d7e-9d51-6d1f0f9a1c11", URL: "https://example.com/in",
		Reason: "failing", FailingSince: time.Now().Add(-120 * time.Hour), ConsecutiveFailures: 40, DisabledAt: time.Now()}
	for range 2 {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return notify(ctx, tx, d) }); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	var to string
	if err := pool.QueryRow(ctx, `SELECT count(*), max(payload->>'to') FROM email_outbox WHERE payload->>'subject' LIKE '%' || $1 || '%'`, d.EndpointID).Scan(&n, &to); err != nil {
		t.Fatal(err)
	}
	if n != 1 || to != "ops@example.com" {
		t.Fatalf("%d notice rows to %q, want 1 to ops@example.com", n, to)
	}
}
