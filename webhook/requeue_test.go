package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A failed delivery requeued goes out again to its own endpoint only,
// under the event's webhook-id, with a fresh attempt budget; a succeeded,
// pending, unknown or malformed one is refused and nothing changes.
func TestRequeueDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	d := bornDelivery(t, p, rc.URL)
	other := createEndpoint(t, pool, rc.URL+"/other") // subscribed too: a replay would reach it
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'failed', attempts = 12,
		next_retry_at = now() + interval '1 day', last_error = 'HTTP 500' WHERE id = $1`, d.ID); err != nil {
		t.Fatal(err)
	}

	if err := RequeueDelivery(ctx, pool, d.ID, "test"); err != nil {
		t.Fatalf("RequeueDelivery: %v", err)
	}
	if got := oneDelivery(t, pool, `id = $1`, d.ID); got.Status != "pending" || got.Attempts != 0 || got.LastError != nil {
		t.Fatalf("requeued delivery %s, %d attempts, last error %q; want pending, 0, none", got.Status, got.Attempts, str(got.LastError))
	}
	if sum, err := p.DrainRetries(ctx, testWindow); err != nil || sum.Sent != 1 {
		t.Fatalf("Retry = %+v, %v; want the requeued delivery sent", sum, err)
	}
	reqs := rc.requests()
	if len(reqs) != 1 || reqs[0].Header.Get("webhook-id") != d.EventID {
		t.Fatalf("receiver got %d requests (webhook-id %q), want 1 under the event's id %s", len(reqs), reqs[0].Header.Get("webhook-id"), d.EventID)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, other.ID); n != 0 {
		t.Errorf("the other endpoint got %d deliveries: a requeue is not a replay", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events`); n != 1 {
		t.Errorf("%d events, want the original only", n)
	}

	for _, tc := range []struct {
		name, id, want string
		notFound       bool
	}{
		{"succeeded", d.ID, "already succeeded", false},
		{"unknown", "00000000-0000-4000-8000-000000000000", "", true},
		{"malformed", "not-a-uuid", "is not an id", true},
	} {
		err := RequeueDelivery(ctx, pool, tc.id, "test")
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotFound) != tc.notFound {
			t.Errorf("%s: RequeueDelivery = %v", tc.name, err)
		}
	}
	if got := oneDelivery(t, pool, `id = $1`, d.ID); got.Status != "succeeded" {
		t.Errorf("a refused requeue changed the delivery to %s", got.Status)
	}
}
