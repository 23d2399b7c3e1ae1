package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// Every mark appends the attempt it records, in the same statement: a row
// retried once and then sent has two log entries, numbered by the claims
// that made them, with the retry's error.
func TestAttempts_EveryMarkLogsItsAttempt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := pgtest.NewPool(t)
	id := insertRow(t, db, "raw", rawPayload("ada@example.com"))
	calls := 0
	d := newDispatcher(t, db, newFakeSender(func(context.Context, smtp.Message) error {
		if calls++; calls == 1 {
			return errors.New("451 4.3.0 try again later")
		}
		return nil
	}))
	for range 2 {
		if _, err := d.RunBatch(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	got, err := AttemptsFor(ctx, db, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Attempt != 1 || got[0].Outcome != OutcomeRetry || got[0].Error != "451 4.3.0 try again later" ||
		got[1].Attempt != 2 || got[1].Outcome != OutcomeSent || got[1].Error != "" || got[1].At.Before(got[0].At) {
		t.Fatalf("attempt log %+v, want attempt 1 retry (with its error) then attempt 2 sent", got)
	}
	if _, err := AttemptsFor(ctx, db, "not-a-uuid"); err == nil {
		t.Error("AttemptsFor accepted a malformed row id")
	}
}

// A stale worker's late retry mark (its lease ran out; a sibling claimed
// the row again) is logged under the attempt it made, not the row's
// current count, so the sibling's own mark of its attempt is not lost; a
// mark that is not applied logs nothing.
func TestAttempts_LateMarkKeepsItsNumberAndStaleMarksLogNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := pgtest.NewPool(t)
	id := insertRow(t, db, "raw", rawPayload("ada@example.com"))
	// The sibling's claim: attempt 2 is in flight.
	if _, err := db.Exec(ctx, `UPDATE email_outbox SET attempts = 2 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	marks := singleMarks{db}
	if _, err := marks.mark(ctx, retryMark(id, 1, time.Minute, errors.New("timeout"), noSeal)); err != nil {
		t.Fatalf("the late retry mark: %v", err)
	}
	if _, err := marks.mark(ctx, dispatchedMark(id, 2)); err != nil {
		t.Fatalf("the sibling's mark: %v", err)
	}
	if _, err := marks.mark(ctx, failedMark(id, 3, errors.New("late"), noSeal)); !errors.Is(err, ErrStaleMark) {
		t.Fatalf("a mark of a dispatched row: %v, want ErrStaleMark", err)
	}
	got, err := AttemptsFor(ctx, db, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Attempt != 1 || got[0].Outcome != OutcomeRetry || got[1].Attempt != 2 || got[1].Outcome != OutcomeSent {
		t.Fatalf("attempt log %+v, want attempt 1 retry and attempt 2 sent, nothing for the stale mark", got)
	}
}
