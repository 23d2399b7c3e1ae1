package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// ReadWaiting counts the due rows of each priority and names the
// customers waiting longest, oldest first; rows not yet due, and sent
// ones, are not waiting.
func TestReadWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload, priority, next_attempt_at, status, dispatched_at) VALUES
		('invoice', 'bulk', '{}', 5, now() - interval '90 seconds', 'pending', NULL),
		('invoice', 'bulk', '{}', 5, now() - interval '80 seconds', 'pending', NULL),
		('password_reset', 'ada', '{}', 2, now() - interval '3 seconds', 'pending', NULL),
		('invoice', 'ada', '{}', 5, now() - interval '10 seconds', 'pending', NULL),
		('invoice', 'later', '{}', 5, now() + interval '1 hour', 'pending', NULL),
		('invoice', 'sent', '{}', 5, now() - interval '1 hour', 'dispatched', now())`); err != nil {
		t.Fatal(err)
	}
	w, err := ReadWaiting(ctx, pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.ByPriority) != 2 || w.ByPriority[0].Priority != 2 || w.ByPriority[0].Due != 1 ||
		w.ByPriority[1].Priority != 5 || w.ByPriority[1].Due != 3 || w.ByPriority[1].Customers != 2 ||
		w.ByPriority[1].OldestDue < 89*time.Second || w.ByPriority[1].OldestDue > 5*time.Minute {
		t.Errorf("by priority: %+v", w.ByPriority)
	}
	if len(w.Customers) != 1 || w.Customers[0].CustomerID != "bulk" || w.Customers[0].Due != 2 {
		t.Errorf("the customer waiting longest: %+v, want bulk with 2 rows", w.Customers)
	}
}
