package outbox

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

// These tests lock the per-row budgets (see docs/design/outbox-transport.md,
// Derived constants): each step of a row that hangs costs the row its own
// budget and the row is recorded as a transient failure, instead of the hang
// running on until some outer bound (the send's 40 s, the row's 60 s, the
// batch's 300 s). Each shrinks the budget under test; the default figures are
// locked by TestLeaseInvariantChain and leases' own tests.

// blockedFor is how long a blocked step waits for its context before
// giving up on its own: far beyond the shrunk budgets, far below the outer
// bounds that take over when a budget is missing.
const blockedFor = 20 * time.Second

var errNotCancelled = errors.New("the step's context did not end within 20 s")

// blockUntilDone waits for ctx to end and returns its error, or
// errNotCancelled after blockedFor.
func blockUntilDone(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(blockedFor):
		return errNotCancelled
	}
}

// runBatchBounded runs runBatch and fails the test if it has not returned
// within limit; release, if not nil, is called then to unblock it.
func runBatchBounded(t *testing.T, d *Dispatcher, limit time.Duration, release func()) (Tally, error) {
	t.Helper()
	type result struct {
		t   Tally
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := d.runBatch(testCtx(t))
		done <- result{sum, err}
	}()
	select {
	case r := <-done:
		return r.t, r.err
	case <-time.After(limit):
		t.Errorf("runBatch has not returned after %s", limit)
		if release != nil {
			release()
		}
		r := <-done
		return r.t, r.err
	}
}

// wantRetriedWith asserts the batch recorded row id as a transient failure
// whose last_error contains every one of want.
func wantRetriedWith(t *testing.T, db DB, sum Tally, err error, id string, want ...string) {
	t.Helper()
	if err != nil || sum.Retried != 1 || sum.Sent != 0 {
		t.Errorf("runBatch = %+v, %v; want the row retried", sum, err)
	}
	r := getRow(t, db, id)
	if r.Status != "pending" || r.Attempts != 1 {
		t.Errorf("row %s after %d attempts, want pending after 1", r.Status, r.Attempts)
	}
	for _, w := range want {
		if !strings.Contains(lastErr(r), w) {
			t.Errorf("last_error = %q; want it to contain %q", lastErr(r), w)
		}
	}
}

// TestPerRowBudget_BoundsTheRow: the row's own context (PerRowBudget, here
// from leases.Config) ends a send that hangs, well before the send's own
// 40 s and the batch's timeout.
func TestPerRowBudget_BoundsTheRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	lc := leases.Default()
	lc.BatchSize = 1
	lc.PerRowBudget = 300 * time.Millisecond
	lc.BatchTimeout = time.Minute // the batch does not bound the row
	lc.LeaseSlack = time.Minute
	sender := newFakeSender(func(ctx context.Context, _ smtp.Message) error { return blockUntilDone(ctx) })
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Leases = lc })
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))

	sum, err := runBatchBounded(t, d, 30*time.Second, nil)
	wantRetriedWith(t, pool, sum, err, id, "context deadline exceeded")
	if n := sender.callsFor(id); n != 1 {
		t.Errorf("row sent %d times, want 1", n)
	}
}

// TestBrandingBudget_BoundsTheRenderer: a renderer that hangs is given
// BrandingBudget, not the rest of the row's 60 s.
func TestBrandingBudget_BoundsTheRenderer(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	sender := newFakeSender(nil)
	var renderErr error
	d := newDispatcher(t, pool, sender, func(c *Config) {
		c.Renderer = RendererFunc(func(ctx context.Context, _ *Row) (smtp.Message, error) {
			renderErr = blockUntilDone(ctx)
			return smtp.Message{}, renderErr
		})
	})
	d.brandingBudget = 300 * time.Millisecond
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))

	sum, err := runBatchBounded(t, d, 30*time.Second, nil)
	wantRetriedWith(t, pool, sum, err, id, "render: context deadline exceeded")
	if !errors.Is(renderErr, context.DeadlineExceeded) {
		t.Errorf("renderer returned %v; want its context's deadline", renderErr)
	}
	if n := sender.callsFor(id); n != 0 {
		t.Errorf("row sent %d times, want 0", n)
	}
}

// TestSuppressionBudget_BoundsTheLookup: while another transaction holds
// email_suppressions locked, the batch's lookup and then the row's own
// each get SuppressionBudget; the row is not sent (its recipient may be
// suppressed) and is retried. Without either budget the lookup waits for
// the lock (the batch's 300 s, the row's 60 s).
func TestSuppressionBudget_BoundsTheLookup(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	logs := newLogRecorder()
	sender := newFakeSender(nil)
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Logger = slog.New(logs) })
	d.suppressionBudget = 300 * time.Millisecond
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))

	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlock := func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }
	t.Cleanup(unlock)
	if _, err := lock.Exec(ctx, `LOCK TABLE email_suppressions IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	sum, err := runBatchBounded(t, d, 30*time.Second, unlock)
	unlock()
	wantRetriedWith(t, pool, sum, err, id, "suppression check")
	if n := sender.callsFor(id); n != 0 {
		t.Errorf("row sent %d times while its suppression was unknown, want 0", n)
	}
	if n := len(logs.find(slog.LevelWarn, "batch suppression lookup failed")); n != 1 {
		t.Errorf("%d log lines say the batch lookup failed, want 1", n)
	}
}
