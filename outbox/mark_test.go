package outbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// The batch context dies after the send and before the mark — cancelled, or
// its deadline passes. The mark runs on a detached context, so the send is
// recorded anyway (see docs/design/outbox-transport.md, Detached marks).
// Marking on the batch context would lose it, and the next tick would re-send
// a delivered email.
func TestMark_SurvivesBatchContextDeath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		batchCtx func(parent context.Context) (context.Context, context.CancelFunc)
		send     func(batch context.Context, cancel context.CancelFunc)
	}{
		{
			name:     "cancelled",
			batchCtx: context.WithCancel,
			send:     func(_ context.Context, cancel context.CancelFunc) { cancel() },
		},
		{
			name: "deadline passed",
			batchCtx: func(parent context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(parent, fastLeases(time.Second).PerRowBudget+300*time.Millisecond)
			},
			// The server accepted the message just as the deadline passed.
			send: func(batch context.Context, _ context.CancelFunc) { <-batch.Done() },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))

			batch, cancel := tc.batchCtx(testCtx(t))
			defer cancel()
			sender := newFakeSender(func(context.Context, smtp.Message) error {
				tc.send(batch, cancel)
				return nil
			})
			d := newDispatcher(t, pool, sender, func(c *Config) { c.Leases = fastLeases(time.Second) })
			res, err := d.runBatch(batch)
			if err != nil {
				t.Fatalf("runBatch: %v", err)
			}
			if batch.Err() == nil {
				t.Fatal("the batch context is still alive: the test did not kill it")
			}
			st := getRow(t, pool, id)
			if res.Sent != 1 || st.Status != "dispatched" || st.DispatchedAt == nil {
				t.Fatalf("after the batch context died: result %+v, row %s; want the send recorded as dispatched", res, st.Status)
			}
		})
	}
}

// A relay's reply may hold NUL bytes and invalid UTF-8, which a text
// column refuses. The retry mark must still be recorded, with the reply
// made storable, or the row would fail its mark on every attempt.
func TestMark_ReplyWithNULAndInvalidUTF8IsRecorded(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	sender := newFakeSender(func(context.Context, smtp.Message) error {
		return errors.New("451 4.3.0 busy\x00 \xff try later")
	})
	res, err := newDispatcher(t, pool, sender).runBatch(testCtx(t))
	if err != nil {
		t.Fatalf("runBatch: %v", err)
	}
	st := getRow(t, pool, id)
	if res.Retried != 1 || st.Status != "pending" || lastErr(st) != "451 4.3.0 busy \uFFFD try later" {
		t.Fatalf("result %+v, row %s with last_error %q; want the retry recorded with a storable reply", res, st.Status, lastErr(st))
	}
}

// A worker's send fails slowly; meanwhile its lease expires and a sibling
// claims and delivers the row. The first worker's failure mark is then
// stale: it must be dropped (logged with the row id and the outcome it
// would have written, counted), never applied over the sibling's success.
func TestMark_StaleFailureAfterSiblingSuccessDropped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		outcome Outcome
	}{
		{"permanent", &smtp.ReplyError{Code: 550, EnhancedCode: "5.1.1", Text: "no such user"}, OutcomeFailed},
		{"transient", &smtp.ReplyError{Code: 451, Text: "try again later"}, OutcomeRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))

			inSend, finish := make(chan struct{}), make(chan struct{})
			slow := newFakeSender(func(context.Context, smtp.Message) error {
				close(inSend)
				<-finish
				return tc.err
			})
			logs := newLogRecorder()
			reg := prometheus.NewRegistry()
			first := newDispatcher(t, pool, slow, func(c *Config) {
				c.Logger = slog.New(logs)
				c.Metrics = NewMetrics(reg)
			})
			var (
				firstRes Tally
				firstErr error
				wg       sync.WaitGroup
			)
			wg.Go(func() { firstRes, firstErr = first.runBatch(ctx) })
			select {
			case <-inSend:
			case <-ctx.Done():
				t.Fatal("first worker never sent")
			}

			// The first worker's lease runs out; a sibling claims the row
			// again and delivers it.
			if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			sibling := newDispatcher(t, pool, newFakeSender(nil))
			if res, err := sibling.runBatch(ctx); err != nil || res.Sent != 1 {
				t.Fatalf("sibling: %+v, %v; want it to deliver the row", res, err)
			}
			delivered := getRow(t, pool, id)

			close(finish)
			wg.Wait()
			if firstErr != nil {
				t.Fatalf("first worker: %v (a stale mark is not a batch error)", firstErr)
			}
			if firstRes.Stale != 1 || firstRes.Failed+firstRes.Retried+firstRes.MarkErrors != 0 {
				t.Errorf("first worker's result %+v, want exactly one stale mark and nothing recorded", firstRes)
			}
			st := getRow(t, pool, id)
			if st.Status != "dispatched" || st.LastError != nil || st.Attempts != delivered.Attempts {
				t.Errorf("row after the stale %s mark: status %s, last_error %q, attempts %d; want the sibling's dispatched record untouched",
					tc.name, st.Status, lastErr(st), st.Attempts)
			}
			if st.RawPayload != delivered.RawPayload {
				t.Errorf("stale mark changed the payload")
			}

			stale := logs.find(slog.LevelWarn, "stale")
			if len(stale) != 1 || stale[0].Attrs["row_id"] != id || stale[0].Attrs["outcome"] != string(tc.outcome) {
				t.Errorf("stale-mark log lines %+v, want one with row_id %s and outcome %s", stale, id, tc.outcome)
			}
			if got := counterValue(t, reg, "postbox_stale_marks_total", "email_outbox"); got != 1 {
				t.Errorf("postbox_stale_marks_total{outbox=email_outbox} = %v after a stale %s mark, want 1", got, tc.outcome)
			}
		})
	}
}

// Every mark is a CAS on status = 'pending': against a row that is already
// dispatched, skipped or failed it returns ErrStaleMark naming the row and
// outcome, and changes nothing.
func TestMark_CASRefusesResolvedRows(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	marks := []struct {
		outcome Outcome
		mark    func(id string) error
	}{
		{OutcomeSent, func(id string) error { return Mark(ctx, pool, id, Result{Outcome: OutcomeSent}) }},
		{OutcomeSkipped, func(id string) error { return Mark(ctx, pool, id, Result{Outcome: OutcomeSkipped}) }},
		{OutcomeFailed, func(id string) error {
			return Mark(ctx, pool, id, Result{Outcome: OutcomeFailed, Err: errors.New("late failure")})
		}},
		{OutcomeRetry, func(id string) error {
			return Mark(ctx, pool, id, Result{Outcome: OutcomeRetry, RetryIn: time.Minute, Err: errors.New("late failure")})
		}},
	}
	for _, status := range []string{"dispatched", "skipped", "failed"} {
		for _, m := range marks {
			id := insertRow(t, pool, "raw", map[string]any{"to": "ada@example.com", "subject": "s", "text": "t", "invite_url": "https://example.com/i"})
			if _, err := pool.Exec(ctx, `UPDATE email_outbox SET status = $2::text,
	dispatched_at = CASE WHEN $2::text = 'dispatched' THEN now() END, last_error = 'earlier' WHERE id = $1`, id, status); err != nil {
				t.Fatal(err)
			}
			before := getRow(t, pool, id)
			err := m.mark(id)
			var stale *StaleMarkError
			if !errors.Is(err, ErrStaleMark) || !errors.As(err, &stale) || stale.ID != id || stale.Outcome != m.outcome {
				t.Errorf("%s mark on a %s row: %v, want a *StaleMarkError for %s", m.outcome, status, err, id)
			}
			after := getRow(t, pool, id)
			if after.Status != before.Status || lastErr(after) != lastErr(before) || after.RawPayload != before.RawPayload ||
				after.Attempts != before.Attempts || (after.DueIn-before.DueIn).Abs() > time.Second {
				t.Errorf("%s mark on a %s row changed it: %+v → %+v", m.outcome, status, before, after)
			}
		}
	}
}

// The claim is the only place attempts increases (see
// docs/design/outbox-transport.md, Claim and lease): no mark touches it.
func TestMark_NeverCountsAttempts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	for _, m := range []struct {
		outcome Outcome
		mark    func(id string) error
	}{
		{OutcomeSent, func(id string) error { return Mark(ctx, pool, id, Result{Outcome: OutcomeSent}) }},
		{OutcomeSkipped, func(id string) error { return Mark(ctx, pool, id, Result{Outcome: OutcomeSkipped}) }},
		{OutcomeFailed, func(id string) error {
			return Mark(ctx, pool, id, Result{Outcome: OutcomeFailed, Err: errors.New("boom")})
		}},
		{OutcomeRetry, func(id string) error {
			return Mark(ctx, pool, id, Result{Outcome: OutcomeRetry, RetryIn: time.Minute, Err: errors.New("boom")})
		}},
	} {
		id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
		rows, err := Claim(ctx, pool, 1, time.Minute)
		if err != nil || len(rows) != 1 || rows[0].ID != id {
			t.Fatalf("claim: %v, %v", rows, err)
		}
		if err := m.mark(id); err != nil {
			t.Fatalf("%s mark: %v", m.outcome, err)
		}
		if st := getRow(t, pool, id); st.Attempts != 1 {
			t.Errorf("after claim + %s mark attempts = %d, want 1", m.outcome, st.Attempts)
		}
	}
}

// counterValue reads one labelled counter (or an unlabelled one, with
// label "") from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" && len(m.GetLabel()) == 0 {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{%s} not found", name, label)
	return 0
}
