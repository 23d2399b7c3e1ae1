package webhook

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestEventID_IsWhatEnqueueReturned checks that the id an enqueue returns
// is the webhook-id the receiver gets through the real dispatcher: the
// fan-out gives the event its outbox row's id. A replay is a new event
// with a new id, linked to the one enqueued.
func TestEventID_IsWhatEnqueueReturned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	enqueue := func(t *testing.T, pool *pgxpool.Pool, ev Event) string {
		t.Helper()
		id, err := enqueueEvent(t, pool, ev)
		if err != nil {
			t.Fatalf("EnqueueEvent: %v", err)
		}
		return id
	}
	tests := []struct {
		name    string
		enqueue func(t *testing.T, pool *pgxpool.Pool) string
	}{
		{"EnqueueEvent", func(t *testing.T, pool *pgxpool.Pool) string {
			return enqueue(t, pool, Event{Type: "invoice.paid", Payload: []byte(`{"n":1}`)})
		}},
		{"plain SQL INSERT RETURNING id", func(t *testing.T, pool *pgxpool.Pool) string {
			return insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
		}},
		{"idempotent enqueue returns the holder's id", func(t *testing.T, pool *pgxpool.Pool) string {
			ev := Event{Type: "invoice.paid", Payload: []byte(`{"n":1}`), IdempotencyKey: "in_1.paid"}
			first, again := enqueue(t, pool, ev), enqueue(t, pool, ev)
			if again != first {
				t.Fatalf("second enqueue with the same key returned %s, want the holder %s", again, first)
			}
			return again
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			p := newDispatcher(t, pool, nil)
			rc := newReceiver(t, nil)
			ep := createEndpoint(t, pool, rc.URL)

			id := tt.enqueue(t, pool)
			if _, err := p.Drain(ctx, testWindow); err != nil {
				t.Fatalf("Drain: %v", err)
			}
			reqs := rc.requests()
			if len(reqs) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(reqs))
			}
			if got := reqs[0].Header.Get(HeaderID); got != id {
				t.Fatalf("receiver saw webhook-id %q, enqueue returned %q", got, id)
			}
			if err := Verify(ep.Secret, reqs[0].Header, reqs[0].Body); err != nil {
				t.Fatalf("Verify of the delivered request: %v", err)
			}

			// The id finds the event and the outbox row alike.
			if e, err := GetEvent(ctx, pool, id); err != nil || e.OutboxID != id {
				t.Fatalf("GetEvent(%s) = %+v, %v; want the event made from outbox row %s", id, e, err, id)
			}
			if o, err := GetOutbox(ctx, pool, id); err != nil || o.EventID != id {
				t.Fatalf("GetOutbox(%s) = %+v, %v; want event id %s", id, o, err, id)
			}
			// A second fan-out of the row is refused: the mark first, and
			// the event's primary key besides.
			if _, err := p.DispatchFromOutbox(ctx, id); !errors.Is(err, ErrStaleOutboxMark) {
				t.Fatalf("second DispatchFromOutbox = %v, want ErrStaleOutboxMark", err)
			}

			rep, err := p.ReplayEvent(ctx, id)
			if err != nil {
				t.Fatalf("ReplayEvent: %v", err)
			}
			if rep.EventID == id || rep.ReplayOf != id {
				t.Fatalf("ReplayEvent = %+v, want a new event id linked to %s", rep, id)
			}
			reqs = rc.requests()
			if got := reqs[len(reqs)-1].Header.Get(HeaderID); got != rep.EventID {
				t.Fatalf("replay sent webhook-id %q, want the clone's %q", got, rep.EventID)
			}
		})
	}
}
