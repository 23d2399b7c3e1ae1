package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The pruner deletes only dispatched webhook_outbox rows older than the
// retention; pending and failed rows, events, deliveries and attempts stay.
func TestPrune_OnlyDispatchedOutboxRowsPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(o *Config) { o.Settings.OutboxRetention = 24 * time.Hour })
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)

	old := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": "old"})
	recent := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": "recent"})
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	pendingOld := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": "pending"})
	failedOld := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": "failed"})
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET dispatched_at = now() - interval '25 hours' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET created_at = now() - interval '30 days',
	next_attempt_at = now() + interval '1 day',
	status = CASE WHEN id = $2 THEN 'failed' ELSE status END
WHERE id IN ($1, $2)`, pendingOld, failedOld); err != nil {
		t.Fatal(err)
	}
	events := count(t, pool, `SELECT count(*) FROM webhook_events`)
	ds := count(t, pool, `SELECT count(*) FROM webhook_deliveries`)
	attempts := count(t, pool, `SELECT count(*) FROM webhook_delivery_attempts`)

	n, err := p.Prune(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1 row", n, err)
	}
	for id, want := range map[string]int{old: 0, recent: 1, pendingOld: 1, failedOld: 1} {
		if got := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1`, id); got != want {
			t.Errorf("outbox row %s: %d left, want %d", id, got, want)
		}
	}
	if count(t, pool, `SELECT count(*) FROM webhook_events`) != events ||
		count(t, pool, `SELECT count(*) FROM webhook_deliveries`) != ds ||
		count(t, pool, `SELECT count(*) FROM webhook_delivery_attempts`) != attempts {
		t.Fatal("pruning touched events, deliveries or attempts")
	}
	if _, err := PruneOutbox(ctx, pool, 0); err == nil {
		t.Fatal("PruneOutbox with zero retention would delete every dispatched row; want an error")
	}
}

func TestRequeueOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failed := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	pending := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET status = 'failed', attempts = 10, next_attempt_at = now() + interval '1 day' WHERE id = $1`, failed); err != nil {
		t.Fatal(err)
	}
	if err := RequeueOutbox(ctx, pool, failed); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1 AND status = 'pending' AND attempts = 0 AND next_attempt_at <= now()`, failed); n != 1 {
		t.Fatal("requeued row is not pending, attempts 0, due now")
	}
	if err := RequeueOutbox(ctx, pool, pending); err == nil || !strings.Contains(err.Error(), "only a failed row") {
		t.Fatalf("RequeueOutbox(pending) = %v, want a refusal", err)
	}
	if err := RequeueOutbox(ctx, pool, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RequeueOutbox(unknown) = %v, want ErrNotFound", err)
	}
}
