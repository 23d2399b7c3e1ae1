package outbox

import (
	"testing"

	"github.com/postbox/postbox/internal/testsupport/pgtest"
)

// The attempt log and the delivery events are partitioned by week, and
// their unique indexes hold within a week only: a mark of an attempt
// already logged in an earlier week, and a provider's replay of an event
// recorded in an earlier week, must still add nothing.
func TestHistoryWeeks_RepeatsInAnEarlierWeekAddNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := pgtest.NewPool(t)
	if _, err := db.Exec(ctx, `SELECT postbox_history_partitions(t, now() - interval '3 weeks', now())
		FROM unnest(ARRAY['email_attempts', 'email_events']::regclass[]) t`); err != nil {
		t.Fatal(err)
	}

	t.Run("attempt", func(t *testing.T) {
		t.Parallel()
		id := insertRow(t, db, "raw", rawPayload("ada@example.com"))
		// The row was made two weeks ago and its first attempt logged
		// then; its worker's mark of that attempt comes only now.
		if _, err := db.Exec(ctx, `UPDATE email_outbox SET created_at = now() - interval '15 days', attempts = 1 WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO email_attempts (row_id, attempt, outcome, at)
			VALUES ($1, 1, 'retry', now() - interval '14 days')`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := MarkDispatched(ctx, db, id); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM email_attempts WHERE row_id = $1 AND attempt = 1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("attempt 1 logged %d times; want once: logged two weeks ago, the late mark adds nothing", n)
		}
	})
	t.Run("event", func(t *testing.T) {
		t.Parallel()
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
