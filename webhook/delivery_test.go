package webhook

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// bornDelivery fans one event out to one endpoint at url and returns the
// delivery, born leased and not yet attempted.
func bornDelivery(t *testing.T, p *Dispatcher, url string) deliveryState {
	t.Helper()
	ep := createEndpoint(t, p.pool, url)
	id := insertOutbox(t, p.pool, "invoice.paid", map[string]any{"n": 1})
	if _, err := p.DispatchFromOutbox(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return oneDelivery(t, p.pool, `endpoint_id = $1`, ep.ID)
}

// Mark's CAS drops a stale failure mark after a sibling's
// success: the late writer (a first attempt that outlived its lease) must
// not turn a delivered webhook back into one that will be sent again.
func TestMark_DropsStaleFailureMarkAfterSiblingSuccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	d := bornDelivery(t, p, "http://127.0.0.1:9/unused")

	// The retry worker claimed it after the birth lease (attempt 2) and
	// the receiver accepted it.
	if err := Mark(ctx, pool, d.ID, Result{Outcome: OutcomeSent, Attempt: 2, StatusCode: 200, Duration: 20 * time.Millisecond}); err != nil {
		t.Fatalf("sibling's success mark: %v", err)
	}
	// The first attempt comes back late with a failure, either kind.
	for _, stale := range []Result{
		{Outcome: OutcomeRetry, RetryIn: 5 * time.Second, Attempt: 1, StatusCode: 500, Error: "HTTP 500"},
		{Outcome: OutcomeFailed, Attempt: 1, Error: "gave up"},
	} {
		err := Mark(ctx, pool, d.ID, stale)
		if !errors.Is(err, ErrStaleMark) {
			t.Fatalf("stale %s mark = %v, want ErrStaleMark", stale.Outcome, err)
		}
	}
	got := oneDelivery(t, pool, `id = $1`, d.ID)
	if got.Status != "succeeded" || got.LastError != nil || got.DeliveredAt == nil {
		t.Fatalf("after stale marks: status %s, last_error %s, delivered_at %v; want the sibling's success intact",
			got.Status, str(got.LastError), got.DeliveredAt)
	}
	// Every attempt is still in the log: the requests really happened.
	if n := count(t, pool, `SELECT count(*) FROM webhook_delivery_attempts WHERE delivery_id = $1`, d.ID); n != 3 {
		t.Fatalf("%d attempt rows, want 3", n)
	}
}

// A mark runs on a detached context: an attempt already made is recorded
// even when the batch that made it was cancelled in the meantime.
func TestMark_RecordsOnCancelledContext(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	d := bornDelivery(t, p, "http://127.0.0.1:9/unused")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Mark(ctx, pool, d.ID, Result{Outcome: OutcomeSent, Attempt: 1, StatusCode: 204}); err != nil {
		t.Fatalf("Mark on a cancelled context: %v", err)
	}
	if got := oneDelivery(t, pool, `id = $1`, d.ID); got.Status != "succeeded" {
		t.Fatalf("status = %s, want succeeded", got.Status)
	}
}

// The pipeline handles ErrStaleMark — logged, counted, reported —
// and leaves the sibling's result alone.
func TestAttempt_StaleMarkIsCountedNotApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	p := newDispatcher(t, pool, func(o *Config) { o.Metrics = metrics })

	// While the attempt is in flight a sibling delivers the same row.
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if _, err := pool.Exec(r.Context(), `UPDATE webhook_deliveries SET status = 'succeeded', delivered_at = now()`); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	ep := createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	sum, err := p.Drain(ctx, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Stale != 1 || sum.Retried != 0 {
		t.Fatalf("ProcessBatch = %+v, want one stale mark and no retry scheduled", sum)
	}
	if got := counterValue(t, reg, "postbox_stale_marks_total", "webhook_deliveries"); got != 1 {
		t.Fatalf("stale delivery marks counted = %v, want 1", got)
	}
	if d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID); d.Status != "succeeded" || d.LastError != nil {
		t.Fatalf("delivery %s (%s), want the sibling's success intact", d.Status, str(d.LastError))
	}
}
