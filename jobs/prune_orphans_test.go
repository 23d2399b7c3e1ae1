package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// TestPasses_PruneDeletesOldOrphanEvents: the gated prune pass is what
// keeps orphan delivery events bounded. One pass deletes
// the orphans older than the configured retention — 30 days when none is
// configured — and reports how many; younger orphans and correlated events
// of any age stay. Ages are set in the database, not waited for.
func TestPasses_PruneDeletesOldOrphanEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		kept      map[string]bool
	}{
		{"the default, 30 days", 0, map[string]bool{
			"orphan-1d": true, "orphan-3d": true, "orphan-31d": false, "row-31d": true}},
		{"configured, 48h", 48 * time.Hour, map[string]bool{
			"orphan-1d": true, "orphan-3d": false, "orphan-31d": false, "row-31d": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pool := pgtest.NewPool(t)
			var row string
			if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload, status, dispatched_at)
VALUES ('raw', 'cus_1', '{"to":"ada@example.com","subject":"Hi","text":"Hi"}', 'dispatched', now()) RETURNING id::text`).Scan(&row); err != nil {
				t.Fatal(err)
			}
			// The events are back-dated: their weeks must exist.
			if _, err := pool.Exec(ctx, `SELECT postbox_history_partitions('email_events', now() - interval '31 days', now())`); err != nil {
				t.Fatal(err)
			}
			ages := map[string]string{"orphan-1d": "1 day", "orphan-3d": "3 days", "orphan-31d": "31 days", "row-31d": "31 days"}
			wantPruned := int64(0)
			for id, age := range ages {
				e := outbox.Event{Type: outbox.EventDelivered, Provider: "generic", ProviderEventID: id, Recipient: "ada@example.com"}
				if id == "row-31d" {
					e.RowID = row
				}
				if _, err := outbox.RecordEvent(ctx, pool, e, outbox.SuppressionPolicy{}); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `UPDATE email_events SET received_at = now() - $2::interval WHERE provider_event_id = $1`, id, age); err != nil {
					t.Fatal(err)
				}
				if !tc.kept[id] {
					wantPruned++
				}
			}
			p, err := webhook.NewDispatcher(pool, webhook.Config{Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			out, err := NewPasses(p, pool, PassesConfig{Owner: "r", OrphanEventRetention: tc.retention, Logger: discard}).Prune(ctx)
			if err != nil || out.Held != "" || out.PrunedOrphanEvents == nil || *out.PrunedOrphanEvents != wantPruned {
				t.Fatalf("prune pass: %+v, %v; want %d orphan events pruned", out, err, wantPruned)
			}
			for id, want := range tc.kept {
				if got := scalar[bool](t, pool, `SELECT EXISTS (SELECT FROM email_events WHERE provider_event_id = $1)`, id); got != want {
					t.Errorf("%s (%s old): kept %v; want %v", id, ages[id], got, want)
				}
			}
		})
	}
}
