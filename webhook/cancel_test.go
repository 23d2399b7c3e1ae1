package webhook

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// An event with SendAt ahead is not fanned out before it is due, however
// many drains run, and is once its due time has come (moved to now, as
// the clock would); one over a year ahead is refused.
func TestSendAt_EventHeldUntilDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	enqueue := func(at time.Time) (string, error) {
		return enqueueEvent(t, pool, Event{Type: "trial.ending", Payload: []byte(`{"customer":"cus_1"}`), SendAt: at})
	}
	id, err := enqueue(time.Now().Add(72 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := p.Drain(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE outbox_id = $1`, id); n != 0 || len(rc.requests()) != 0 {
		t.Fatalf("before its due time: %d events, %d requests; want none", n, len(rc.requests()))
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET next_attempt_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE outbox_id = $1`, id); n != 1 || len(rc.requests()) != 1 {
		t.Fatalf("once due: %d events, %d requests; want 1, 1", n, len(rc.requests()))
	}
	if _, err := enqueue(time.Now().Add(MaxSendAhead + time.Hour)); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "send_at") {
		t.Fatalf("SendAt over a year ahead = %v; want ErrInvalidEvent naming send_at", err)
	}
}

// Cancel withdraws a pending row and refuses the others with the reason;
// the pruner deletes a cancelled row past the retention as it deletes a
// dispatched one.
func TestCancel_OutboxRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(o *Config) { o.Settings.OutboxRetention = 24 * time.Hour })
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	sent := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	pending := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET next_attempt_at = now() + interval '1 day' WHERE id = $1`, pending); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id, refusal string
	}{
		{"pending", pending, ""},
		{"cancelled already", pending, "was already cancelled at"},
		{"fanned out", sent, "was already fanned out; its deliveries are not cancelled"},
		{"unknown", "00000000-0000-7000-8000-00000000dead", "not found"},
	} {
		err := Cancel(ctx, pool, tc.id, "alice")
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: Cancel = %v; want it cancelled", tc.name, err)
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%s: Cancel = %v; want a refusal saying %q", tc.name, err, tc.refusal)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET next_attempt_at = now() WHERE id = $1`, pending); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE outbox_id = $1`, pending); n != 0 {
		t.Fatalf("a cancelled row was fanned out: %d events", n)
	}
	if err := RequeueOutbox(ctx, pool, pending); err == nil || !strings.Contains(err.Error(), "is cancelled") {
		t.Fatalf("RequeueOutbox of a cancelled row = %v; want refused naming its status", err)
	}
	if n, err := p.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("Prune within the retention = %d, %v; want 0", n, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET cancelled_at = now() - interval '25 hours' WHERE id = $1`, pending); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Prune(ctx); err != nil || n != 1 {
		t.Fatalf("Prune past the retention = %d, %v; want the cancelled row", n, err)
	}
}

// Who cancelled is cut to the column's 200 bytes on a rune boundary, as
// the email side cuts it: a name of 100 "€" (300 bytes) cut mid-rune would
// be invalid UTF-8, which Postgres refuses, and the cancel would fail.
func TestCancel_LongWhoCutOnARuneBoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	id := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET next_attempt_at = now() + interval '1 day' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	who := strings.Repeat("€", 100)
	if err := Cancel(ctx, pool, id, who); err != nil {
		t.Fatalf("Cancel with a who of 100 €: %v", err)
	}
	var by string
	if err := pool.QueryRow(ctx, `SELECT cancelled_by FROM webhook_outbox WHERE id = $1`, id).Scan(&by); err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("€", 66); by != want {
		t.Fatalf("cancelled_by = %q (%d bytes); want %q, the runes that fit in 200 bytes", by, len(by), want)
	}
}

// The guarantee for events: a cancel racing the fan-out never both sends
// and says cancelled. Two dispatchers drain rows to a real HTTP receiver
// while two cancellers try every row; afterwards no cancelled row has an
// event, and no request the receiver got is of a cancelled row's event.
func TestCancel_RacingFanOutsNeverBothSendAndCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	rc := newReceiver(t, nil)
	createEndpoint(t, pool, rc.URL)
	ids := insertDueRows(t, pool, 150)
	ds := []*Dispatcher{newDispatcher(t, pool, nil), newDispatcher(t, pool, nil)}
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			if _, err := d.Drain(ctx, testWindow); err != nil {
				t.Errorf("drain: %v", err)
			}
		})
	}
	for c := range 2 {
		wg.Go(func() {
			for i := c; i < len(ids); i += 2 {
				if err := Cancel(ctx, pool, ids[i], "racer"); err != nil && !errors.Is(err, ErrNotCancellable) {
					t.Errorf("cancel %s: %v", ids[i], err)
				}
			}
		})
	}
	wg.Wait()
	for _, d := range ds {
		if _, err := d.Drain(ctx, testWindow); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox o JOIN webhook_events e ON e.outbox_id = o.id
		WHERE o.status = 'cancelled'`); n != 0 {
		t.Fatalf("%d cancelled rows have an event", n)
	}
	for _, r := range rc.requests() {
		var status string
		if err := pool.QueryRow(ctx, `SELECT o.status FROM webhook_events e JOIN webhook_outbox o ON o.id = e.outbox_id
			WHERE e.id = $1`, r.Header.Get("webhook-id")).Scan(&status); err != nil || status != "dispatched" {
			t.Errorf("request for event %s: its row is %q (%v); want dispatched", r.Header.Get("webhook-id"), status, err)
		}
	}
	cancelled := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE status = 'cancelled'`)
	dispatched := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE status = 'dispatched'`)
	if cancelled+dispatched != len(ids) {
		t.Fatalf("%d cancelled + %d dispatched of %d rows; want every row one or the other", cancelled, dispatched, len(ids))
	}
	t.Logf("%d dispatched, %d cancelled", dispatched, cancelled)
}
