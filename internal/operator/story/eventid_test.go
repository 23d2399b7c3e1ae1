package story

import (
	"context"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// TestFind_EventByTheIDEnqueueReturned follows one id — what plain SQL's
// INSERT … RETURNING id gave, and the webhook-id receivers see — through
// the row's life: the outbox row before its fan-out, the event after it
// (and after the row is pruned), the row again when asked for by kind.
func TestFind_EventByTheIDEnqueueReturned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	find := func(t *testing.T, kind, want Kind) Story {
		t.Helper()
		s, err := Find(ctx, pool, id, kind)
		if err != nil || s.Kind != want {
			t.Fatalf("Find(%s, %q) = kind %q, %v; want %q", id, kind, s.Kind, err, want)
		}
		return s
	}
	find(t, "", KindWebhookOutbox) // not fanned out yet

	p, err := webhook.NewDispatcher(pool, webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	d, err := p.DispatchFromOutbox(ctx, id)
	if err != nil || d.EventID != id {
		t.Fatalf("DispatchFromOutbox = %+v, %v; want event %s", d, err, id)
	}
	for _, tc := range []struct {
		name       string
		kind, want Kind
		prune      bool
	}{
		{"detected: the event", "", KindEvent, false},
		{"forced: the outbox row", KindWebhookOutbox, KindWebhookOutbox, false},
		{"after the pruner: still the event", "", KindEvent, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prune {
				if _, err := pool.Exec(ctx, `DELETE FROM webhook_outbox WHERE id = $1`, id); err != nil {
					t.Fatal(err)
				}
			}
			s := find(t, tc.kind, tc.want)
			switch {
			case tc.want == KindEvent && (s.Event == nil || s.Event.ID != id || s.Event.OutboxID != id):
				t.Fatalf("event story: %+v", s.Event)
			case tc.want == KindWebhookOutbox && (s.WebhookOutbox == nil || s.WebhookOutbox.EventID != id):
				t.Fatalf("outbox story: %+v", s.WebhookOutbox)
			}
		})
	}
}
