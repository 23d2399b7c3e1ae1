package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// Requeue runs the operator UPDATE (see docs/design/outbox-transport.md,
// Redelivery semantics) on a failed row only: failed → pending, attempts 0,
// due now, and the next batch sends the whole email. Every other state is
// refused with a message that says why.
func TestRequeue_OnlyFailed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)

	// One row of each state, reached the way production reaches it.
	failed := insertRow(t, pool, "raw", secretPayload())
	fail := newDispatcher(t, pool, newFakeSender(func(context.Context, smtp.Message) error {
		return &smtp.ReplyError{Code: 550, Text: "mailbox unavailable"}
	}))
	if res, err := fail.runBatch(ctx); err != nil || res.Failed != 1 {
		t.Fatalf("setting up the failed row: %+v, %v", res, err)
	}
	dispatched := insertRow(t, pool, "raw", secretPayload())
	skipped := insertRow(t, pool, "raw", secretPayload())
	skip := RendererFunc(func(ctx context.Context, row *Row) (smtp.Message, error) {
		if row.ID == skipped {
			return smtp.Message{}, ErrSkip
		}
		return DefaultRenderer().Render(ctx, row)
	})
	if res, err := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) { c.Renderer = skip }).runBatch(ctx); err != nil || res.Sent != 1 || res.Skipped != 1 {
		t.Fatalf("setting up the dispatched and skipped rows: %+v, %v", res, err)
	}
	pending := insertRow(t, pool, "raw", secretPayload())

	for _, tc := range []struct {
		name    string
		id      string
		wantErr error
		wantMsg string
	}{
		{"dispatched", dispatched, ErrNotFailed, "send a new email instead"},
		{"skipped", skipped, ErrNotFailed, "send a new email instead"},
		{"pending", pending, ErrNotFailed, "still pending"},
		{"unknown id", "00000000-0000-4000-8000-000000000000", ErrNotFound, "no such email"},
		{"not a uuid", "42; DROP TABLE email_outbox", ErrNotFound, "not an email id"},
	} {
		var before rowState
		if tc.wantErr == ErrNotFailed {
			before = getRow(t, pool, tc.id)
		}
		err := Requeue(ctx, pool, tc.id, "test")
		if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("Requeue(%s row): %v, want %v saying %q", tc.name, err, tc.wantErr, tc.wantMsg)
		}
		if tc.wantErr == ErrNotFailed {
			var nf *NotFailedError
			if !errors.As(err, &nf) || nf.Status != tc.name {
				t.Errorf("Requeue(%s row): %#v, want a *NotFailedError with status %s", tc.name, err, tc.name)
			}
			if after := getRow(t, pool, tc.id); after.Status != before.Status || after.Attempts != before.Attempts {
				t.Errorf("refused requeue changed the %s row: %+v → %+v", tc.name, before, after)
			}
		}
	}

	if err := Requeue(ctx, pool, failed, "test"); err != nil {
		t.Fatalf("Requeue(failed row): %v", err)
	}
	st := getRow(t, pool, failed)
	if st.Status != "pending" || st.Attempts != 0 || st.DueIn > 0 {
		t.Fatalf("requeued row: %s, %d attempts, due in %s; want pending, 0, due now", st.Status, st.Attempts, st.DueIn)
	}
	sender := newFakeSender(nil)
	if res, err := newDispatcher(t, pool, sender).runBatch(ctx); err != nil || res.Sent != 2 {
		t.Fatalf("sending the requeued row (and the pending one): %+v, %v", res, err)
	}
	var requeued []smtp.Message
	for _, m := range sender.messages() {
		if m.RowID == failed {
			requeued = append(requeued, m)
		}
	}
	if len(requeued) != 1 || string(requeued[0].PDF) != "%PDF-1.7 invoice" {
		t.Errorf("requeued row sent as %+v, want the complete email with its PDF, once", requeued)
	}
	if err := Requeue(ctx, pool, failed, "test"); !errors.Is(err, ErrNotFailed) {
		t.Errorf("second Requeue of the now-dispatched row: %v, want ErrNotFailed", err)
	}
}
