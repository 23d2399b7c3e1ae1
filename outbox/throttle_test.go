package outbox

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

// Replies a relay gives in these tests: three kinds of throttling, and an
// ordinary transient failure.
var (
	reply421   = &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 7, 0}, Message: "Too many messages, slow down"}
	reply451x7 = &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 7, 1}, Message: "Rate limit exceeded"}
	replySES   = &gosmtp.SMTPError{Code: 454, EnhancedCode: gosmtp.EnhancedCode{4, 7, 0}, Message: "Throttling failure: Maximum sending rate exceeded."}
	reply451   = &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "Local error in processing"}
)

// scriptedRelay is an in-process SMTP relay (smtpsink) that answers the
// DATA of successive messages with replies, in order, then accepts.
func scriptedRelay(t *testing.T, replies []error) *smtp.Mailer {
	t.Helper()
	var mu sync.Mutex
	_, mailer := newSinkMailerWith(t, smtpsink.Options{Fault: func(smtpsink.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if len(replies) == 0 {
			return nil
		}
		r := replies[0]
		replies = replies[1:]
		return r
	}})
	return mailer
}

func repeat(r error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// A relay's throttling reply is retried within seconds, not on the
// backoff schedule, and does not spend the retry budget: twenty throttles
// (more than the 15 slots) and then acceptance send the row; so do twenty
// throttles among fifteen ordinary 451s, the budget's whole worth. An
// ordinary 451 still counts: sixteen of them fail the row, throttles or
// not. Every attempt is logged, the throttles as retries with the reply.
func TestThrottle_RetriedInSecondsWithoutSpendingTheBudget(t *testing.T) {
	t.Parallel()
	budget := len(leases.EmailBackoff)
	for _, tc := range []struct {
		name       string
		replies    []error
		wantStatus string
	}{
		{"20 × 454 SES Throttling, then accepted", repeat(replySES, 20), "dispatched"},
		{"20 × 421, then accepted", repeat(reply421, 20), "dispatched"},
		{"20 × 451 4.7.1, then accepted", repeat(reply451x7, 20), "dispatched"},
		{"20 throttles among 15 × 451 4.3.0, then accepted",
			append(append(repeat(replySES, 10), repeat(reply451, budget)...), repeat(reply421, 10)...), "dispatched"},
		{"20 throttles and 16 × 451 4.3.0: failed",
			append(repeat(reply451x7, 20), repeat(reply451, budget+1)...), "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			d := newDispatcher(t, pool, scriptedRelay(t, tc.replies))
			id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
			var throttles, counted int
			for range len(tc.replies) + 1 {
				if _, err := d.runBatch(ctx); err != nil {
					t.Fatal(err)
				}
				st := getRow(t, pool, id)
				if st.Status != "pending" {
					break
				}
				throttled := !strings.Contains(lastErr(st), "451 4.3.0")
				if throttled {
					throttles++
					// Seconds, jittered over half to one and a half
					// ThrottleRetry; the database clock may be a little
					// behind the attempt's.
					if lo, hi := ThrottleRetry/2-2*time.Second, ThrottleRetry*3/2; st.DueIn < lo || st.DueIn > hi {
						t.Fatalf("after a throttle (%s): due in %s, want within [%s, %s]", lastErr(st), st.DueIn, lo, hi)
					}
				} else {
					counted++
					slot := leases.EmailBackoff[counted-1]
					if lo, hi := slot*9/10-2*time.Second, slot*11/10; st.DueIn < lo || st.DueIn > hi {
						t.Fatalf("after ordinary failure %d: due in %s, want backoff slot %s ±10%%", counted, st.DueIn, slot)
					}
				}
				// Time passes: the wait is over.
				if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1`, id); err != nil {
					t.Fatal(err)
				}
			}
			st := getRow(t, pool, id)
			if st.Status != tc.wantStatus {
				t.Fatalf("row %s (last_error %q) after %d throttles and %d ordinary failures; want %s",
					st.Status, lastErr(st), throttles, counted, tc.wantStatus)
			}
			if tc.wantStatus == "failed" && !strings.Contains(lastErr(st), fmt.Sprintf("gave up after %d attempts", budget+1)) {
				t.Fatalf("last_error %q, want it to give up after the %d ordinary failures", lastErr(st), budget+1)
			}
			log, err := AttemptsFor(ctx, pool, id)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]string, 0, len(tc.replies)+1)
			for _, r := range tc.replies {
				want = append(want, fmt.Sprintf("retry %d", r.(*gosmtp.SMTPError).Code))
			}
			if tc.wantStatus == "failed" {
				want[len(want)-1] = "failed 451"
			} else {
				want = append(want, "sent")
			}
			if st.Attempts != len(want) || len(log) != len(want) {
				t.Fatalf("the row counts %d attempts and logs %d; want %d", st.Attempts, len(log), len(want))
			}
			for i, a := range log {
				outcome, code, _ := strings.Cut(want[i], " ")
				if string(a.Outcome) != outcome || !strings.Contains(a.Error, code) {
					t.Fatalf("attempt %d logged %s %q, want %s", a.Attempt, a.Outcome, a.Error, want[i])
				}
			}
		})
	}
}

// A requeue gives the row a fresh budget: its throttles go with the
// attempts they were taken from, by plain SQL too (migration 00020's
// trigger), so a requeued row is not credited with throttles it no longer
// has attempts for.
func TestThrottle_RequeueResetsTheThrottles(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	d := newDispatcher(t, pool, scriptedRelay(t, append(repeat(replySES, 3), &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 7, 1}, Message: "no"})))
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	for range 4 {
		if _, err := d.runBatch(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1 AND status = 'pending'`, id); err != nil {
			t.Fatal(err)
		}
	}
	read := func() (status string, attempts, throttles int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT status, attempts, throttles FROM email_outbox WHERE id = $1`, id).Scan(&status, &attempts, &throttles); err != nil {
			t.Fatal(err)
		}
		return
	}
	if s, a, th := read(); s != "failed" || a != 4 || th != 3 {
		t.Fatalf("row %s, %d attempts, %d throttles; want failed after 4 attempts, 3 of them throttled", s, a, th)
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET status = 'pending', attempts = 0, next_attempt_at = now() WHERE id = $1 AND status = 'failed'`, id); err != nil {
		t.Fatal(err)
	}
	if s, a, th := read(); s != "pending" || a != 0 || th != 0 {
		t.Fatalf("after a plain-SQL requeue: row %s, %d attempts, %d throttles; want pending, 0, 0", s, a, th)
	}
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	if s, a, th := read(); s != "dispatched" || a != 1 || th != 0 {
		t.Fatalf("after the requeue's send: row %s, %d attempts, %d throttles; want dispatched, 1, 0", s, a, th)
	}
}
