package story

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A row older than what retention dropped says its log starts late,
// naming the variable and its value, in the story and its text; a younger
// row says nothing of it; a webhook event not found, once retention has
// deleted events, says they may have been among them.
func TestFind_SaysWhenRetentionDroppedHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var old, young string
	for _, r := range []struct {
		into *string
		age  string
	}{{&old, "200 days"}, {&young, "1 day"}} {
		if err := db.QueryRow(ctx, `INSERT INTO email_outbox (kind, payload, created_at, status, dispatched_at)
			VALUES ('raw', '{"to":"ada@example.com","subject":"s","text":"t"}', now() - $1::interval, 'dispatched', now())
			RETURNING id`, r.age).Scan(r.into); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO postbox_history_dropped (history, dropped_before, retention) VALUES
		('email_attempts', now() - interval '180 days', '180 days'),
		('webhook_events', now() - interval '90 days', '90 days')`); err != nil {
		t.Fatal(err)
	}

	s, err := Find(ctx, db, old, KindEmail)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.HistoryDropped) != 1 || !strings.Contains(s.HistoryDropped[0], "attempts before ") ||
		!strings.Contains(s.HistoryDropped[0], "EMAIL_HISTORY_RETENTION=180d") {
		t.Fatalf("a row of 200 days ago, with 180 days of attempts kept: %q; want one note naming EMAIL_HISTORY_RETENTION=180d", s.HistoryDropped)
	}
	var b strings.Builder
	if err := WriteText(&b, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "history: attempts before ") {
		t.Fatalf("worker show:\n%s\nwant the note on dropped attempts", b.String())
	}

	if s, err := Find(ctx, db, young, KindEmail); err != nil || len(s.HistoryDropped) != 0 {
		t.Fatalf("a row of yesterday: %q, %v; want no note", s.HistoryDropped, err)
	}

	_, err = Find(ctx, db, "0194f3a2-0000-7000-8000-000000000000", KindEvent)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "deleted by retention (WEBHOOK_HISTORY_RETENTION=90d)") {
		t.Fatalf("an event not found after retention deleted some: %v; want it to say so", err)
	}
	_, err = Find(ctx, db, "0194f3a2-0000-7000-8000-000000000000", KindEmail)
	if !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "retention") {
		t.Fatalf("an email not found: %v; want no word of retention: emails are kept", err)
	}
}
