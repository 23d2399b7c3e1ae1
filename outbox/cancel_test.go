package outbox

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// enqueueAt writes one email due at sendAt through Enqueue and returns its
// id.
func enqueueAt(t *testing.T, pool *pgxpool.Pool, sendAt time.Time, p Payload) (string, error) {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	id, err := Enqueue(ctx, tx, Email{CustomerID: "cus_1", Payload: p, SendAt: sendAt})
	if err != nil {
		return "", err
	}
	return id, tx.Commit(ctx)
}

func resetPayload() Payload {
	return Payload{To: "ada@example.com", Subject: "Reset", Text: "Reset it: https://x/r/1", PasswordResetURL: "https://x/r/1"}
}

// A row scheduled ahead is not claimed while it is not due, however many
// claims run, and is claimed once its due time has come (here: moved to
// now, as the clock would). A past SendAt is now; one over a year ahead
// is refused naming the field.
func TestSendAt_HeldUntilDue(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	id, err := enqueueAt(t, pool, time.Now().Add(72*time.Hour), resetPayload())
	if err != nil {
		t.Fatal(err)
	}
	if r := getRow(t, pool, id); r.DueIn < 71*time.Hour || r.Status != "pending" || r.Attempts != 0 {
		t.Fatalf("scheduled row: %+v; want pending, 0 attempts, due in ~72h", r)
	}
	for range 3 {
		rows, err := Claim(ctx, pool, 10, time.Minute)
		if err != nil || len(rows) != 0 {
			t.Fatalf("claim before the due time: %d rows, %v; want none", len(rows), err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	rows, err := Claim(ctx, pool, 10, time.Minute)
	if err != nil || len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("claim once due: %v, %v; want the row", rows, err)
	}

	past, err := enqueueAt(t, pool, time.Now().Add(-time.Hour), resetPayload())
	if err != nil {
		t.Fatal(err)
	}
	if r := getRow(t, pool, past); r.DueIn > time.Second || r.DueIn < -time.Minute {
		t.Fatalf("SendAt an hour ago: due in %s; want now", r.DueIn)
	}
	_, err = enqueueAt(t, pool, time.Now().Add(MaxSendAhead+time.Hour), resetPayload())
	var verr *ValidationError
	if !errors.As(err, &verr) || verr.Field != "send_at" {
		t.Fatalf("SendAt over a year ahead = %v; want a ValidationError naming send_at", err)
	}
}

// Cancel withdraws a pending row no worker holds — scheduled, or backing
// off after a retry — scrubbing its secret keys as the skipped mark does,
// and refuses every other state with the reason.
func TestCancel_WhatItTakesAndRefuses(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)

	scheduled, err := enqueueAt(t, pool, time.Now().Add(time.Hour), resetPayload())
	if err != nil {
		t.Fatal(err)
	}
	backingOff, _ := enqueueAt(t, pool, time.Time{}, resetPayload())
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() - interval '1 hour' WHERE id <> $1`, scheduled); err != nil {
		t.Fatal(err)
	}
	if rows, err := Claim(ctx, pool, 1, time.Hour); err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v %v", rows, err)
	}
	if err := Mark(ctx, pool, backingOff, Result{Outcome: OutcomeRetry, RetryIn: time.Hour, Err: errors.New("421 try later")}); err != nil {
		t.Fatal(err)
	}
	claimed, _ := enqueueAt(t, pool, time.Time{}, resetPayload())
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() - interval '1 hour' WHERE id = $1`, claimed); err != nil {
		t.Fatal(err)
	}
	if rows, err := Claim(ctx, pool, 1, time.Hour); err != nil || len(rows) != 1 || rows[0].ID != claimed {
		t.Fatalf("claim: %v %v", rows, err)
	}
	sent, _ := enqueueAt(t, pool, time.Time{}, resetPayload())
	if err := Mark(ctx, pool, sent, Result{Outcome: OutcomeSent}); err != nil {
		t.Fatal(err)
	}

	checkCancels(t, pool, []cancelCase{
		{"scheduled", scheduled, ""},
		{"backing off after a retry", backingOff, ""},
		{"claimed, its lease running", claimed, "is being sent now (claimed until "},
		{"sent", sent, "was already sent at"},
		{"cancelled already", scheduled, "was already cancelled at"},
		{"unknown", "00000000-0000-7000-8000-00000000dead", "no such email"},
		{"not an id", "INV-1", "is not an email id"},
	})
	var status, by string
	var scrubbed []string
	var hasSecret bool
	if err := pool.QueryRow(ctx, `SELECT status, cancelled_by, scrubbed_keys, payload ? 'password_reset_url'
		FROM email_outbox WHERE id = $1`, scheduled).Scan(&status, &by, &scrubbed, &hasSecret); err != nil {
		t.Fatal(err)
	}
	if status != "cancelled" || by != "alice" || hasSecret || len(scrubbed) != 1 || scrubbed[0] != "password_reset_url" {
		t.Fatalf("cancelled row: %s by %q, scrubbed %v, secret still there %v; want cancelled by alice, password_reset_url scrubbed",
			status, by, scrubbed, hasSecret)
	}
	if err := Requeue(ctx, pool, scheduled, "bob"); !errors.Is(err, ErrNotFailed) || !strings.Contains(err.Error(), "was cancelled") {
		t.Fatalf("Requeue of a cancelled row = %v; want refused naming the cancel", err)
	}
}

// The guarantee: a cancel racing claimers never both sends and says
// cancelled. Two dispatchers drain rows to a real SMTP server while two
// cancellers try every row again and again; afterwards no row is both at
// the server and cancelled, and every row is one or the other.
func TestCancel_RacingClaimersNeverBothSendAndCancel(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	sink, err := smtpsink.Start(smtpsink.Options{DataDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	ids := insertRows(t, pool, 200)
	dispatchers := make([]*Dispatcher, 2)
	for i := range dispatchers {
		mailer, err := smtp.New(smtp.Config{Host: sink.Host(), Port: sink.Port(), Mode: smtp.ModeNone, From: "billing@example.com"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mailer.Close() })
		dispatchers[i] = newDispatcher(t, pool, mailer)
	}
	var wg sync.WaitGroup
	for _, d := range dispatchers {
		wg.Go(func() {
			if _, err := d.Drain(ctx, time.Minute); err != nil {
				t.Errorf("drain: %v", err)
			}
		})
	}
	for c := range 2 {
		wg.Go(func() {
			for range 3 {
				for i := c; i < len(ids); i += 2 {
					err := Cancel(ctx, pool, ids[i], "racer")
					if err != nil && !errors.Is(err, ErrNotCancellable) && !strings.Contains(err.Error(), "changed while cancelling") {
						t.Errorf("cancel %s: %v", ids[i], err)
					}
				}
			}
		})
	}
	wg.Wait()
	// Whatever is still pending (refused while claimed, then released or
	// retried) is drained now; nothing cancels any more.
	for _, d := range dispatchers {
		if _, err := d.Drain(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	atServer := sink.CountByRowID()
	var cancelled, sent int
	for _, id := range ids {
		r := getRow(t, pool, id)
		switch {
		case r.Status == "cancelled" && atServer[id] > 0:
			t.Errorf("row %s is cancelled and reached the SMTP server %d times", id, atServer[id])
		case r.Status == "cancelled":
			cancelled++
		case r.Status == "dispatched" && atServer[id] > 0:
			sent++
		default:
			t.Errorf("row %s: %s, %d at the server; want sent or cancelled", id, r.Status, atServer[id])
		}
	}
	t.Logf("%d sent, %d cancelled", sent, cancelled)
}

// A worker whose lease ran out before it sent (here: held in the batch's
// loop until the database says its lease has ended) does not send once a
// cancel went through: the batch's deadline, inside the lease, has passed,
// and its late mark finds the row cancelled.
func TestCancel_AfterTheLeaseOfASlowWorkerExpired(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	sink, mailer := newSinkMailer(t)
	id := insertRows(t, pool, 1)[0]
	var cancelErr error
	d := newDispatcher(t, pool, mailer, func(c *Config) {
		c.Leases = fastLeases(500 * time.Millisecond)
		c.Leases.BatchSize = 1
		c.Leases.BatchTimeout = time.Second
		c.Leases.LeaseSlack = time.Second
	})
	d.hooks.beforeRow = func(r *Row) {
		over := eventually.Within(time.Minute, func() bool {
			var over bool
			if err := pool.QueryRow(ctx, `SELECT next_attempt_at < now() FROM email_outbox WHERE id = $1`, r.ID).Scan(&over); err != nil {
				t.Error(err)
				return true
			}
			return over
		})
		if !over {
			t.Error("the row's lease never ran out")
		}
		cancelErr = Cancel(ctx, pool, r.ID, "alice")
	}
	if _, err := d.runBatch(ctx); err != nil {
		t.Logf("batch: %v", err)
	}
	if cancelErr != nil {
		t.Fatalf("cancel after the lease ran out = %v; want it cancelled", cancelErr)
	}
	if n := sink.CountByRowID()[id]; n != 0 {
		t.Fatalf("the slow worker sent the cancelled row %d times", n)
	}
	if r := getRow(t, pool, id); r.Status != "cancelled" {
		t.Fatalf("row: %s; want cancelled", r.Status)
	}
}

// cancelCase is a Cancel by alice and what it answers: refusal is text
// its refusal holds, or "" for cancelled.
type cancelCase struct{ name, id, refusal string }

func checkCancels(t *testing.T, pool *pgxpool.Pool, cases []cancelCase) {
	t.Helper()
	for _, tc := range cases {
		err := Cancel(testCtx(t), pool, tc.id, "alice")
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: Cancel = %v; want it cancelled", tc.name, err)
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%s: Cancel = %v; want a refusal saying %q", tc.name, err, tc.refusal)
		}
	}
}

// claimRow makes row id due and claims it, alone, under an hour's lease.
func claimRow(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() - interval '1 hour' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if rows, err := Claim(ctx, pool, 1, time.Hour); err != nil || len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("claim of %s: %v %v", id, rows, err)
	}
}

// Whether a pending row is being sent now is decided by its current
// claim's attempt alone: not by created_at, which the application writes
// (a clock ahead of the database's, an explicit value), and not by an
// attempt logged before a requeue, which numbered the attempts before it.
func TestCancel_DecidedByTheCurrentClaimsAttempt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	enqueue := func() string {
		t.Helper()
		id, err := enqueueAt(t, pool, time.Time{}, resetPayload())
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	// Made an hour ahead of the database's clock, then backing off after
	// a relay's 451: its attempt is logged before its created_at.
	ahead := enqueue()
	exec(`UPDATE email_outbox SET created_at = now() + interval '1 hour' WHERE id = $1`, ahead)
	claimRow(t, pool, ahead)
	if err := Mark(ctx, pool, ahead, Result{Outcome: OutcomeRetry, RetryIn: time.Hour, Err: errors.New("451 4.7.1 try again later")}); err != nil {
		t.Fatal(err)
	}
	// Made ahead too, and claimed: its worker holds it.
	aheadClaimed := enqueue()
	exec(`UPDATE email_outbox SET created_at = now() + interval '1 hour' WHERE id = $1`, aheadClaimed)
	claimRow(t, pool, aheadClaimed)
	// Failed at attempt #1, requeued, and claimed again: its worker holds
	// it under attempt #2 while #1 is in the log.
	requeued := enqueue()
	claimRow(t, pool, requeued)
	if err := Mark(ctx, pool, requeued, Result{Outcome: OutcomeFailed, Err: errors.New("550 5.1.1 no such user")}); err != nil {
		t.Fatal(err)
	}
	if err := Requeue(ctx, pool, requeued, "bob"); err != nil {
		t.Fatal(err)
	}
	claimRow(t, pool, requeued)

	checkCancels(t, pool, []cancelCase{
		{"made ahead of the database clock, backing off", ahead, ""},
		{"made ahead of the database clock, claimed", aheadClaimed, "is being sent now (claimed until "},
		{"requeued and claimed again, its lease running", requeued, "is being sent now (claimed until "},
	})
}
