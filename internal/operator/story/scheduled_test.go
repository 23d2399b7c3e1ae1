package story

import (
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/webhook"
)

// A pending row never attempted and due later is "scheduled for" its due
// time, not retrying; one due now waits for its first attempt; one with
// attempts is retrying; a cancelled one says so.
func TestVerdict_ScheduledIsNotRetrying(t *testing.T) {
	t.Parallel()
	later := time.Now().Add(72 * time.Hour)
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, tc := range []struct {
		name string
		e    Email
		want string
	}{
		{"scheduled", Email{ID: "r1", Status: "pending", NextAttemptAt: later}, "scheduled for " + later.UTC().Format(time.RFC3339)},
		{"due now", Email{ID: "r2", Status: "pending", NextAttemptAt: time.Now().Add(-time.Second)}, "waiting for its first attempt"},
		{"backing off", Email{ID: "r3", Status: "pending", Attempts: 2, NextAttemptAt: later}, "2 attempts so far, next at"},
		{"cancelled", Email{ID: "r4", Status: "cancelled"}, "cancelled before it was sent"},
		{"cancelled, when and by whom", Email{ID: "r5", Status: "cancelled", CancelledAt: &at, CancelledBy: "carol"},
			"cancelled at 2026-03-04T05:06:07Z by carol before it was sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got, _ := verdict(tc.e); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("verdict = %q, want it to start %q", got, tc.want)
			}
		})
	}
}

// The webhook_outbox row's story says the same of a row held by its
// send-at.
func TestText_ScheduledWebhookOutboxRow(t *testing.T) {
	t.Parallel()
	later := time.Now().Add(72 * time.Hour)
	for _, tc := range []struct {
		name string
		o    webhook.OutboxRecord
		want string
	}{
		{"scheduled", webhook.OutboxRecord{ID: "w1", EventType: "trial.ending", Status: "pending", NextAttemptAt: later}, "  scheduled for "},
		{"retrying", webhook.OutboxRecord{ID: "w2", EventType: "trial.ending", Status: "pending", Attempts: 1, NextAttemptAt: later}, "  next attempt "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			if err := WriteText(&b, Story{WebhookOutbox: &tc.o}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.want) {
				t.Fatalf("story:\n%s\nwant a line starting %q", b.String(), tc.want)
			}
		})
	}
}
