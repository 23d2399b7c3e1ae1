package outbox

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
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
		if _, err := d.runBatch(ctx); err != nil {
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
	if _, err := markAlone(ctx, db, retryMark(id, 1, time.Minute, errors.New("timeout"), noSeal)); err != nil {
		t.Fatalf("the late retry mark: %v", err)
	}
	if _, err := markAlone(ctx, db, dispatchedMark(id, 2)); err != nil {
		t.Fatalf("the sibling's mark: %v", err)
	}
	if _, err := markAlone(ctx, db, failedMark(id, 3, errors.New("late"), noSeal)); !errors.Is(err, ErrStaleMark) {
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

// A requeue gives the row a fresh attempt budget, and the log goes on: the
// attempts after it are logged under new numbers (#3 after #1 retried and #2
// failed), not dropped as repeats of the first ones, and the requeue itself
// is in the log between them, with who ran it and from which state. The
// operator UPDATE run as plain SQL (see docs/design/outbox-transport.md,
// Redelivery semantics) is logged the same way and named by its database
// role.
func TestAttempts_LogGoesOnAfterARequeue(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := pgtest.NewPool(t)
	byAPI := insertRow(t, db, "raw", rawPayload("ada@example.com"))
	bySQL := insertRow(t, db, "raw", rawPayload("grace@example.com"))
	var reply error
	d := newDispatcher(t, db, newFakeSender(func(context.Context, smtp.Message) error { return reply }))
	run := func(want func(Tally) bool) {
		t.Helper()
		if _, err := db.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE status = 'pending'`); err != nil {
			t.Fatal(err)
		}
		if res, err := d.runBatch(ctx); err != nil || !want(res) {
			t.Fatalf("batch: %+v, %v", res, err)
		}
	}
	reply = errors.New("451 4.3.0 try again later")
	run(func(r Tally) bool { return r.Retried == 2 })
	reply = &smtp.ReplyError{Code: 550, Text: "mailbox unavailable"}
	run(func(r Tally) bool { return r.Failed == 2 })

	if err := Requeue(ctx, db, byAPI, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE email_outbox SET status = 'pending', attempts = 0, next_attempt_at = now()
WHERE id = $1 AND status = 'failed'`, bySQL); err != nil {
		t.Fatal(err)
	}
	var role string
	if err := db.QueryRow(ctx, `SELECT session_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	// A worker whose lease ran out before the failure marks its attempt
	// #1 late, after the requeue: not logged under the new numbering.
	if _, err := markAlone(ctx, db, retryMark(byAPI, 1, 0, errors.New("late"), noSeal)); err != nil {
		t.Fatal(err)
	}
	reply = nil
	run(func(r Tally) bool { return r.Sent == 2 })

	for _, tc := range []struct {
		id, by string
	}{{byAPI, "alice"}, {bySQL, "sql:" + role}} {
		got, err := AttemptsFor(ctx, db, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		want := []Attempt{
			{Attempt: 1, Outcome: OutcomeRetry, Error: "451 4.3.0 try again later"},
			{Attempt: 2, Outcome: OutcomeFailed},
			{Attempt: 2, Outcome: OutcomeRequeued, By: tc.by, From: StatusFailed},
			{Attempt: 3, Outcome: OutcomeSent},
		}
		if len(got) != len(want) {
			t.Fatalf("%s's log %+v, want %d entries: %+v", tc.by, got, len(want), want)
		}
		for i, w := range want {
			g := got[i]
			if g.Attempt != w.Attempt || g.Outcome != w.Outcome || g.By != w.By || g.From != w.From ||
				(w.Error != "" && g.Error != w.Error) {
				t.Errorf("%s's log entry %d: %+v, want %+v", tc.by, i, g, w)
			}
		}
		rec, err := Get(ctx, db, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != StatusDispatched || rec.Attempts != 1 || rec.PriorAttempts != 2 {
			t.Errorf("%s's row: %s, attempts %d, prior %d; want dispatched, 1 since the requeue, 2 before it",
				tc.by, rec.Status, rec.Attempts, rec.PriorAttempts)
		}
	}
}

// email_requeues records, with each requeue, the number of the row's last
// attempt over its life, not over its budget since the last requeue: here
// #1 failed, a requeue, #2 retried and #3 failed, a second requeue — which
// records #3, not the 2 attempts its budget spent.
func TestAttempts_RequeueRecordsTheLifetimeAttemptNumber(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	fail := func() {
		t.Helper()
		claimRow(t, pool, id)
		if err := Mark(ctx, pool, id, Result{Outcome: OutcomeFailed, Err: errors.New("550 5.1.1 no such user")}); err != nil {
			t.Fatal(err)
		}
		if err := Requeue(ctx, pool, id, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	fail()
	claimRow(t, pool, id)
	if err := Mark(ctx, pool, id, Result{Outcome: OutcomeRetry, RetryIn: time.Hour, Err: errors.New("451 4.3.0 try again later")}); err != nil {
		t.Fatal(err)
	}
	fail()
	rows, err := pool.Query(ctx, `SELECT attempt FROM email_requeues WHERE row_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("email_requeues.attempt %v, want [1 3]: each requeue after the row's last attempt over its life", got)
	}
}
