package webhook

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A replay goes where its original went. An event addressed to endpoint A
// (Event.EndpointID, webhook_outbox.endpoint_id) reached A only; its
// replay — of the original or of a replay, while its outbox row is kept
// and after the pruner deleted it — reaches A only too, and B, subscribed
// to the same type, receives nothing. An event fanned out to every
// subscribed endpoint is replayed to every one, as before. ReplayTargets,
// what the console's confirmation lists, names the same endpoints.
func TestReplayEvent_GoesWhereTheOriginalWent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rcA, rcB := newReceiver(t, nil), newReceiver(t, nil)
	a, b := createEndpoint(t, pool, rcA.URL), createEndpoint(t, pool, rcB.URL)

	enqueueToA := func() string {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		id, err := Enqueuer{}.EnqueueEvent(ctx, tx, Event{Type: "invoice.paid", Payload: []byte(`{"n": 1}`), EndpointID: a.ID})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Drain(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
		return id
	}
	addressed := enqueueToA()
	if len(rcA.requests()) != 1 || len(rcB.requests()) != 0 {
		t.Fatalf("the addressed event: A got %d requests, B %d; want 1, 0", len(rcA.requests()), len(rcB.requests()))
	}

	targets := func(id string) string {
		t.Helper()
		eps, err := ReplayTargets(ctx, pool, id)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, ep := range eps {
			ids = append(ids, ep.ID)
		}
		return strings.Join(ids, ",")
	}
	replay := func(id string, wantA, wantB int) Replay {
		t.Helper()
		if got := targets(id); got != a.ID {
			t.Fatalf("ReplayTargets(%s) = %s; want A (%s) only", id, got, a.ID)
		}
		rep, err := p.ReplayEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Deliveries != 1 || len(rcA.requests()) != wantA || len(rcB.requests()) != wantB {
			t.Fatalf("replay of %s: %d deliveries, A got %d requests, B %d; want 1 delivery, %d and %d",
				id, rep.Deliveries, len(rcA.requests()), len(rcB.requests()), wantA, wantB)
		}
		return rep
	}
	first := replay(addressed, 2, 0)
	replay(first.EventID, 3, 0) // a replay of the replay replays the original
	// The pruner deletes the dispatched outbox row after the retention:
	// the event keeps its addressing.
	if _, err := pool.Exec(ctx, `DELETE FROM webhook_outbox WHERE id = $1`, addressed); err != nil {
		t.Fatal(err)
	}
	replay(addressed, 4, 0)
	// An event a binary from before migration 00029 fanned out kept no
	// addressing of its own: its outbox row's, while kept, is it.
	old := enqueueToA()
	if _, err := pool.Exec(ctx, `UPDATE webhook_events SET endpoint_id = NULL WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	replay(old, 6, 0)

	broadcast := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if got, want := targets(broadcast), a.ID+","+b.ID; got != want {
		t.Fatalf("ReplayTargets of an event to every endpoint = %s; want %s", got, want)
	}
	rep, err := p.ReplayEvent(ctx, broadcast)
	if err != nil || rep.Deliveries != 2 || len(rcA.requests()) != 8 || len(rcB.requests()) != 2 {
		t.Fatalf("replay of an event to every endpoint: %+v, %v; A got %d requests, B %d; want 2 deliveries, 8 and 2",
			rep, err, len(rcA.requests()), len(rcB.requests()))
	}
}
