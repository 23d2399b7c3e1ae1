package webhook

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestOutboxFailureMark_StaleIsDroppedNotRetried locks the CAS guard of the
// webhook_outbox failure mark (see docs/design/outbox-transport.md, Detached
// marks): a fan-out that failed while a sibling dispatched the row meanwhile
// must leave the row dispatched, count the mark stale and log it dropped —
// not "will retry". A pending row's failure mark, run the same way, is the
// control: it is applied and counted retried.
func TestOutboxFailureMark_StaleIsDroppedNotRetried(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	var logs logbuf.Buffer
	p := newDispatcher(t, pool, func(o *Config) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	cause := errors.New("fan-out: connection reset")

	type outboxState struct {
		Status       string
		LastError    *string
		NextAttempt  time.Time
		DispatchedAt *time.Time
	}
	read := func(id string) outboxState {
		t.Helper()
		var s outboxState
		if err := pool.QueryRow(ctx, `SELECT status, last_error, next_attempt_at, dispatched_at FROM webhook_outbox WHERE id = $1`, id).
			Scan(&s.Status, &s.LastError, &s.NextAttempt, &s.DispatchedAt); err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Control: a pending row's failure mark applies.
	pending := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	sum := p.markOutboxFailure(ctx, outboxRow{ID: pending, Attempts: 1}, cause, false)
	if sum.Retried != 1 || sum.Stale != 0 {
		t.Fatalf("failure mark on a pending row = %+v; want it retried", sum)
	}
	if s := read(pending); s.Status != "pending" || !strings.Contains(str(s.LastError), "connection reset") {
		t.Fatalf("pending row after its failure mark: %s, last_error %q; want pending with the cause", s.Status, str(s.LastError))
	}
	if !strings.Contains(logs.String(), "outbox_id="+pending) || !strings.Contains(logs.String(), "will retry") {
		t.Fatalf("the control's log does not say will retry:\n%s", logs.String())
	}

	// The row under test: a sibling dispatched it after this drainer's
	// claim and before its failure mark.
	id := insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	if _, err := pool.Exec(ctx, `UPDATE webhook_outbox SET status = 'dispatched', dispatched_at = now(), last_error = NULL WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	before := read(id)
	mark := len(logs.String())
	sum = p.markOutboxFailure(ctx, outboxRow{ID: id, Attempts: 1}, cause, false)
	if sum.Stale != 1 || sum.Retried != 0 || sum.Failed != 0 || sum.MarkErrors != 0 {
		t.Errorf("stale failure mark = %+v; want Stale 1 and nothing retried or failed", sum)
	}
	after := read(id)
	if after.Status != "dispatched" || after.LastError != nil || !after.NextAttempt.Equal(before.NextAttempt) {
		t.Errorf("dispatched row after a stale failure mark: status %s, last_error %q, next_attempt_at %s (was %s); want it untouched",
			after.Status, str(after.LastError), after.NextAttempt, before.NextAttempt)
	}
	var line string
	for l := range strings.SplitSeq(logs.String()[mark:], "\n") {
		if strings.Contains(l, "outbox_id="+id) {
			if line != "" {
				t.Errorf("more than one log line for the stale mark:\n%s\n%s", line, l)
			}
			line = l
		}
	}
	if !strings.Contains(line, "stale outbox failure mark dropped") || strings.Contains(line, "will retry") {
		t.Errorf("stale mark logged as %q; want it logged dropped, not will retry", line)
	}
}
