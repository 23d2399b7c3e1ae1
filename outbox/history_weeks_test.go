package outbox

import (
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The delivery events are partitioned by week, and their unique index
// holds within a week only: a provider's replay of an event recorded in an
// earlier week must still add nothing.
func TestHistoryWeeks_RepeatsInAnEarlierWeekAddNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := pgtest.NewPool(t)
	if _, err := db.Exec(ctx, `SELECT postbox_history_partitions(t, now() - interval '3 weeks', now())
		FROM unnest(ARRAY['email_events']::regclass[]) t`); err != nil {
		t.Fatal(err)
	}

	// The subtest's context is its own: a parallel subtest waits for a
	// free slot after its parent returns, on a busy machine for longer
	// than a context begun before the wait would last.
	t.Run("event", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		if _, err := db.Exec(ctx, `INSERT INTO email_events (type, provider, provider_event_id, received_at)
			VALUES ('deferred', 'postmark', 'weeks-old-1', now() - interval '14 days')`); err != nil {
			t.Fatal(err)
		}
		r, err := RecordEvent(ctx, db, Event{Type: EventDeferred, Provider: "postmark", ProviderEventID: "weeks-old-1"}, SuppressionPolicy{})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM email_events WHERE provider = 'postmark' AND provider_event_id = 'weeks-old-1'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 || !r.Duplicate {
			t.Fatalf("the provider's replay of an event recorded two weeks ago: %d stored, duplicate %v; want 1 and true", n, r.Duplicate)
		}
	})
}
