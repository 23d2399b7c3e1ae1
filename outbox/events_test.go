package outbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// TestEvents_RelayRefusalSuppressesUntilLifted is the suppression lifecycle's
// end-to-end acceptance, on the in-process relay and the real Mailer: the
// relay answers RCPT TO with 550 5.1.1; the row fails, the address goes on
// the list with the reply and the row, and the refusal is the row's bounced
// event. The next email to the address fails at once with that reason and
// never reaches the relay. Lifting the suppression (logged with who) lets the
// next one through, carrying X-Postbox-Row.
func TestEvents_RelayRefusalSuppressesUntilLifted(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	const gone = "gone@example.com"
	var mu sync.Mutex
	refusing, rcpts := true, 0
	sink, mailer := newSinkMailerWith(t, smtpsink.Options{RejectRcpt: func(to string) error {
		mu.Lock()
		defer mu.Unlock()
		if strings.EqualFold(to, gone) {
			rcpts++
			if refusing {
				return smtpsink.UserUnknown(to)
			}
		}
		return nil
	}})
	d := newDispatcher(t, pool, mailer, func(c *Config) { c.Metrics = NewMetrics(nil) })

	first := insertRow(t, pool, "raw", rawPayload("Gone <GONE@example.com>"))
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	st := getRow(t, pool, first)
	if st.Status != "failed" || !strings.Contains(lastErr(st), "550 5.1.1") {
		t.Fatalf("first row %s, last_error %q; want failed with the relay's 550 5.1.1", st.Status, lastErr(st))
	}
	s, ok, err := CheckSuppression(ctx, pool, gone)
	if err != nil || !ok {
		t.Fatalf("after the relay refused the mailbox: suppressed %v, err %v; want on the list", ok, err)
	}
	if s.Source != SourceSMTPReply || s.SourceRow != first || !strings.Contains(s.Reason, "5.1.1") {
		t.Errorf("suppression %+v; want source smtp_reply, source row %s and the reply as reason", s, first)
	}
	events, err := EventsFor(ctx, pool, first)
	if err != nil || len(events) != 1 || events[0].Type != EventBounced || events[0].BounceClass != BounceHard ||
		events[0].Provider != ProviderSMTP || events[0].Recipient != gone {
		t.Fatalf("events of the refused row: %+v, %v; want one hard bounce from smtp", events, err)
	}

	second := insertRow(t, pool, "raw", rawPayload(gone))
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	st = getRow(t, pool, second)
	if st.Status != "failed" || st.Attempts != 1 || !strings.Contains(lastErr(st), "recipient is suppressed: the relay refused the mailbox") ||
		!strings.Contains(lastErr(st), "5.1.1") {
		t.Fatalf("second row %s after %d attempts, last_error %q; want failed at once with the suppression reason",
			st.Status, st.Attempts, lastErr(st))
	}
	mu.Lock()
	if rcpts != 1 {
		t.Errorf("the relay saw RCPT TO %s %d times; want once (the suppressed row is never sent)", gone, rcpts)
	}
	refusing = false
	mu.Unlock()

	lifted, err := LiftSuppression(ctx, pool, "Gone@Example.com", "ops@example.com", nil)
	if err != nil || lifted.Email != gone {
		t.Fatalf("LiftSuppression: %+v, %v", lifted, err)
	}
	var actor string
	if err := pool.QueryRow(ctx, `SELECT actor FROM email_suppression_log WHERE email = $1 AND action = 'lifted'`, gone).Scan(&actor); err != nil || actor != "ops@example.com" {
		t.Errorf("lifting logged actor %q (%v); want ops@example.com", actor, err)
	}
	third := insertRow(t, pool, "raw", rawPayload(gone))
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	if st := getRow(t, pool, third); st.Status != "dispatched" {
		t.Fatalf("after lifting: row %s, last_error %q; want dispatched", st.Status, lastErr(st))
	}
	msgs := sink.Messages()
	if len(msgs) != 1 || msgs[0].RowID != third || !strings.Contains(string(msgs[0].Data), "X-Postbox-Row: "+third+"\r\n") {
		t.Fatalf("relay accepted %d messages; want the third row's, with X-Postbox-Row", len(msgs))
	}
	for _, id := range []string{first, second} {
		if st := getRow(t, pool, id); st.Status != "failed" {
			t.Errorf("row %s is %s after the lift; events and lifts never change a row's status", id, st.Status)
		}
	}
}

// TestDispatch_SuppressionAddedMidBatchStopsTheSend: the batch's view of
// the list is read at the claim; a suppression added while the batch runs
// (after its first send) must stop the send of a later row of the same
// batch — the re-check just before the send. The view's maximum age is set
// to zero so the test does not wait a second.
func TestDispatch_SuppressionAddedMidBatchStopsTheSend(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ids := make([]string, 3)
	for i, to := range []string{"ada@example.com", "bob@example.com", "cy@example.com"} {
		ids[i] = insertRow(t, pool, "raw", rawPayload(to))
		if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() - make_interval(secs => $2) WHERE id = $1`,
			ids[i], float64(10-i)); err != nil {
			t.Fatal(err)
		}
	}
	sender := newFakeSender(nil)
	d := newDispatcher(t, pool, sender)
	d.suppressionMaxAge = 0
	d.hooks.beforeRow = func(row *Row) {
		if row.ID == ids[1] {
			if err := Suppress(context.WithoutCancel(ctx), pool, "bob@example.com", "complaint arrived mid-batch"); err != nil {
				t.Error(err)
			}
		}
	}
	sum, err := d.runBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Claimed != 3 || sum.Sent != 2 || sum.Failed != 1 {
		t.Fatalf("tally %+v; want 3 claimed in one batch, 2 sent, 1 failed", sum)
	}
	if n := sender.callsFor(ids[1]); n != 0 {
		t.Errorf("the row whose recipient was suppressed mid-batch was sent %d times; want 0", n)
	}
	st := getRow(t, pool, ids[1])
	if st.Status != "failed" || !strings.Contains(lastErr(st), "recipient is suppressed: complaint arrived mid-batch") {
		t.Errorf("row %s, last_error %q; want failed with the suppression reason", st.Status, lastErr(st))
	}
	if sender.callsFor(ids[0]) != 1 || sender.callsFor(ids[2]) != 1 {
		t.Error("the other rows of the batch were not sent once each")
	}
}

// TestDispatch_SuppressionViewFreshWithinMaxAge: within its maximum age
// the batch's view is not read again — the re-check costs no query per
// row — so with the default second a suppression added a moment after
// the claim is caught by the next batch, not this one.
func TestDispatch_SuppressionViewFreshWithinMaxAge(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	a := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	b := insertRow(t, pool, "raw", rawPayload("bob@example.com"))
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() - interval '1 minute' WHERE id = $1`, a); err != nil {
		t.Fatal(err)
	}
	sender := newFakeSender(nil)
	d := newDispatcher(t, pool, sender)
	d.suppressionMaxAge = time.Hour
	d.hooks.beforeRow = func(row *Row) {
		if row.ID == b {
			if err := Suppress(context.WithoutCancel(ctx), pool, "bob@example.com", "late"); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	if sender.callsFor(b) != 1 {
		t.Errorf("row sent %d times; want once: a view younger than its maximum age is trusted", sender.callsFor(b))
	}
}

// TestDispatch_PreSendRecheckFailureIsTransient: when the re-check cannot
// read the list, the row is not sent unchecked; it is retried.
func TestDispatch_PreSendRecheckFailureIsTransient(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	sender := newFakeSender(nil)
	d := newDispatcher(t, pool, sender)
	d.suppressionMaxAge = 0
	d.suppressionBudget = 300 * time.Millisecond
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(context.WithoutCancel(ctx)) })
	d.hooks.beforeRow = func(*Row) {
		if _, err := lock.Exec(ctx, `LOCK TABLE email_suppressions IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Error(err)
		}
	}
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	_ = lock.Rollback(ctx)
	st := getRow(t, pool, id)
	if sender.callsFor(id) != 0 || st.Status != "pending" || !strings.Contains(lastErr(st), "suppression re-check before send") {
		t.Errorf("row sent %d times, %s, last_error %q; want unsent and retried with the re-check's error",
			sender.callsFor(id), st.Status, lastErr(st))
	}
}

// TestRecordEvent covers correlation, replays, orphans and the suppression
// lifecycle, against the table's constraints.
func TestRecordEvent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	row := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	if err := Mark(ctx, pool, row, Result{Outcome: OutcomeSent}); err != nil {
		t.Fatal(err)
	}

	t.Run("named row, replay recorded once, status unchanged", func(t *testing.T) {
		e := Event{RowID: row, Type: EventDelivered, Provider: "postmark", ProviderEventID: "delivery-1",
			ProviderMessageID: "pm-1", Recipient: "Ada@Example.com"}
		first, err := RecordEvent(ctx, pool, e, SuppressionPolicy{})
		if err != nil || first.Duplicate || first.Event.RowID != row || first.Event.Recipient != "ada@example.com" {
			t.Fatalf("first: %+v, %v", first, err)
		}
		again, err := RecordEvent(ctx, pool, e, SuppressionPolicy{})
		if err != nil || !again.Duplicate || again.Event.ID != first.Event.ID {
			t.Fatalf("replay: %+v, %v; want the duplicate reported with the stored event", again, err)
		}
		if st := getRow(t, pool, row); st.Status != "dispatched" {
			t.Errorf("row is %s after an event; want dispatched", st.Status)
		}
	})
	t.Run("provider message id fallback", func(t *testing.T) {
		r, err := RecordEvent(ctx, pool, Event{Type: EventDeferred, Provider: "postmark", ProviderEventID: "deferred-1",
			ProviderMessageID: "pm-1"}, SuppressionPolicy{})
		if err != nil || r.Event.RowID != row || r.Event.Orphan() {
			t.Fatalf("%+v, %v; want correlated to %s by the provider's message id", r, err, row)
		}
		other, err := RecordEvent(ctx, pool, Event{Type: EventDeferred, Provider: "ses", ProviderEventID: "deferred-1",
			ProviderMessageID: "pm-1"}, SuppressionPolicy{})
		if err != nil || !other.Event.Orphan() {
			t.Fatalf("%+v, %v; another provider's message id must not correlate", other, err)
		}
	})
	t.Run("unknown row is an orphan, kept with its ref", func(t *testing.T) {
		for _, ref := range []string{"00000000-0000-4000-8000-000000000000", "not-a-row-id"} {
			r, err := RecordEvent(ctx, pool, Event{RowID: ref, Type: EventDelivered, Provider: "generic",
				ProviderEventID: "orphan-" + ref}, SuppressionPolicy{})
			if err != nil || !r.Event.Orphan() || r.Event.Ref != ref || r.Duplicate {
				t.Fatalf("ref %q: %+v, %v; want a stored orphan with the ref", ref, r, err)
			}
		}
		orphans, err := ListEvents(ctx, pool, EventFilter{OrphansOnly: true})
		if err != nil || len(orphans) < 2 {
			t.Fatalf("ListEvents orphans: %d, %v", len(orphans), err)
		}
	})
	t.Run("an event about another recipient than its row's suppresses nothing", func(t *testing.T) {
		r, err := RecordEvent(ctx, pool, Event{RowID: row, Type: EventBounced, BounceClass: BounceHard, Provider: "ses",
			ProviderEventID: "hb-stranger", Recipient: "ceo@bigcorp.example", Detail: "550 5.1.1"}, SuppressionPolicy{SuppressOrphans: true})
		if err != nil || !r.Mismatch || r.Suppressed != nil || r.Event.RowID != row {
			t.Fatalf("%+v, %v; want stored against the row as a mismatch, suppressing nothing", r, err)
		}
		for _, addr := range []string{"ceo@bigcorp.example", "ada@example.com"} {
			if _, ok, err := CheckSuppression(ctx, pool, addr); err != nil || ok {
				t.Errorf("%s suppressed (%v) by an event about another recipient", addr, err)
			}
		}
	})
	t.Run("hard bounce and complaint suppress the row's recipient with the source row", func(t *testing.T) {
		hardRow := insertRow(t, pool, "raw", rawPayload("Hard <Hard@Example.com>"))
		if err := Mark(ctx, pool, hardRow, Result{Outcome: OutcomeSent}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			e    Event
			want SuppressionSource
		}{
			{Event{RowID: hardRow, Type: EventBounced, BounceClass: BounceHard, Provider: "ses", ProviderEventID: "hb",
				Recipient: "hard@example.com", Detail: "smtp; 550 5.1.1 user unknown"}, SourceHardBounce},
			{Event{RowID: row, Type: EventComplained, Provider: "ses", ProviderEventID: "c", Recipient: "ada@example.com"}, SourceComplaint},
		} {
			r, err := RecordEvent(ctx, pool, tc.e, SuppressionPolicy{})
			if err != nil || r.Suppressed == nil || r.Mismatch {
				t.Fatalf("%s: %+v, %v; want suppressed", tc.want, r, err)
			}
			s, ok, err := CheckSuppression(ctx, pool, tc.e.Recipient)
			if err != nil || !ok || s.Source != tc.want || s.SourceRow != tc.e.RowID {
				t.Errorf("%s: entry %+v, %v, %v", tc.want, s, ok, err)
			}
		}
	})
	t.Run("orphans suppress only when the policy allows, and at most the hourly bound", func(t *testing.T) {
		orphan := func(id, addr string, policy SuppressionPolicy) Recorded {
			t.Helper()
			r, err := RecordEvent(ctx, pool, Event{Type: EventBounced, BounceClass: BounceHard, Provider: "generic",
				ProviderEventID: id, Recipient: addr}, policy)
			if err != nil || !r.Event.Orphan() {
				t.Fatalf("%s: %+v, %v; want a stored orphan", id, r, err)
			}
			return r
		}
		if r := orphan("orphan-hb-1", "someone@example.com", SuppressionPolicy{}); r.Suppressed != nil || !r.OrphanHeld {
			t.Fatalf("default policy: %+v; want held, not suppressed", r)
		}
		if r := orphan("orphan-hb-2", "someone@example.com", SuppressionPolicy{SuppressOrphans: true}); r.Suppressed == nil {
			t.Fatalf("SuppressOrphans: %+v; want suppressed", r)
		}
		// The bound counts what orphans added in the last hour, pool-wide.
		if _, err := pool.Exec(ctx, `INSERT INTO email_suppressions (email, reason, source)
			SELECT 'burst' || g || '@example.com', 'orphan hard bounce', 'hard_bounce' FROM generate_series(2, $1) g`, MaxOrphanSuppressionsPerHour); err != nil {
			t.Fatal(err)
		}
		if r := orphan("orphan-hb-3", "one-more@example.com", SuppressionPolicy{SuppressOrphans: true}); r.Suppressed != nil || !r.OrphanHeld {
			t.Fatalf("past %d orphan suppressions in the hour: %+v; want held", MaxOrphanSuppressionsPerHour, r)
		}
		if _, err := pool.Exec(ctx, `UPDATE email_suppressions SET created_at = now() - interval '61 minutes' WHERE email LIKE 'burst%'`); err != nil {
			t.Fatal(err)
		}
		if r := orphan("orphan-hb-4", "one-more@example.com", SuppressionPolicy{SuppressOrphans: true}); r.Suppressed == nil {
			t.Fatalf("an hour later: %+v; want suppressed", r)
		}
	})
	t.Run("soft bounces suppress at the limit within the window", func(t *testing.T) {
		policy := SuppressionPolicy{SoftBounceLimit: 3, SoftBounceWindow: time.Hour, SuppressOrphans: true}
		// An old soft bounce, outside the window, does not count.
		if _, err := RecordEvent(ctx, pool, Event{Type: EventBounced, BounceClass: BounceSoft, Provider: "ses",
			ProviderEventID: "soft-old", Recipient: "full@example.com"}, policy); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE email_events SET received_at = now() - interval '2 hours' WHERE provider_event_id = 'soft-old'`); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{false, false, true} {
			r, err := RecordEvent(ctx, pool, Event{Type: EventBounced, BounceClass: BounceSoft, Provider: "ses",
				ProviderEventID: "soft-" + string(rune('a'+i)), Recipient: "full@example.com", Detail: "mailbox full"}, policy)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Suppressed != nil; got != want {
				t.Fatalf("soft bounce %d: suppressed %v; want %v", i+1, got, want)
			}
		}
		s, _, _ := CheckSuppression(ctx, pool, "full@example.com")
		if s.Source != SourceSoftBounces || !strings.Contains(s.Reason, "3 soft bounces within 1h0m0s") {
			t.Errorf("entry %+v", s)
		}
	})
	t.Run("the shipped policy: the third soft bounce within a week suppresses", func(t *testing.T) {
		for i, want := range []bool{false, false, true} {
			r, err := RecordEvent(ctx, pool, Event{Type: EventBounced, BounceClass: BounceSoft, Provider: "ses",
				ProviderEventID: "shipped-soft-" + string(rune('a'+i)), Recipient: "shipped@example.com"}, SuppressionPolicy{SuppressOrphans: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Suppressed != nil; got != want {
				t.Fatalf("soft bounce %d under the default policy: suppressed %v; want %v", i+1, got, want)
			}
		}
		// Six days old still counts; the window is a week. (Six days ago
		// may be last week, whose partition must exist.)
		if _, err := pool.Exec(ctx, `SELECT postbox_history_partitions('email_events', now() - interval '6 days', now())`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE email_events SET received_at = now() - interval '6 days' WHERE provider_event_id LIKE 'shipped-soft-%'`); err != nil {
			t.Fatal(err)
		}
		if _, err := LiftSuppression(ctx, pool, "shipped@example.com", "test", nil); err != nil {
			t.Fatal(err)
		}
		r, err := RecordEvent(ctx, pool, Event{Type: EventBounced, BounceClass: BounceSoft, Provider: "ses",
			ProviderEventID: "shipped-soft-d", Recipient: "shipped@example.com"}, SuppressionPolicy{SuppressOrphans: true})
		if err != nil || r.Suppressed == nil {
			t.Fatalf("a fourth soft bounce, the others 6 days old: %+v, %v; want suppressed (the window is 7 days)", r, err)
		}
	})
	t.Run("invalid events refused", func(t *testing.T) {
		for _, e := range []Event{
			{Type: "opened", Provider: "x", ProviderEventID: "1"},
			{Type: EventBounced, Provider: "x", ProviderEventID: "1"},
			{Type: EventDelivered, BounceClass: BounceHard, Provider: "x", ProviderEventID: "1"},
			{Type: EventDelivered, Provider: "Bad Provider", ProviderEventID: "1"},
			{Type: EventDelivered, Provider: "x"},
			{Type: EventDelivered, Provider: "x", ProviderEventID: "1", Recipient: "two@a.com, three@b.com"},
		} {
			if _, err := RecordEvent(ctx, pool, e, SuppressionPolicy{}); !errors.Is(err, ErrInvalid) {
				t.Errorf("%+v: err %v; want ErrInvalid", e, err)
			}
		}
	})
	t.Run("long text is capped to what the columns hold", func(t *testing.T) {
		r, err := RecordEvent(ctx, pool, Event{Type: EventDelivered, Provider: "x", ProviderEventID: "long",
			Detail: strings.Repeat("d", 5000), RawExcerpt: strings.Repeat("€", 3000)}, SuppressionPolicy{})
		if err != nil || len(r.Event.Detail) != maxEventTextBytes || len(r.Event.RawExcerpt) > MaxEventExcerptBytes {
			t.Fatalf("%d, %d, %v", len(r.Event.Detail), len(r.Event.RawExcerpt), err)
		}
	})
	t.Run("the table refuses by plain SQL what the Go API refuses", func(t *testing.T) {
		for _, sql := range []string{
			`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('opened', 'x', 'sql-1')`,
			`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('bounced', 'x', 'sql-2')`,
			`INSERT INTO email_events (type, bounce_class, provider, provider_event_id) VALUES ('delivered', 'hard', 'x', 'sql-3')`,
			`INSERT INTO email_events (type, provider, provider_event_id, raw_excerpt) VALUES ('delivered', 'x', 'sql-4', repeat('r', 4097))`,
			`INSERT INTO email_events (type, provider, provider_event_id, recipient) VALUES ('delivered', 'x', 'sql-5', 'Ada@x.com')`,
			`INSERT INTO email_events (type, provider, provider_event_id) VALUES ('delivered', 'x', '')`,
			`INSERT INTO email_suppressions (email, source) VALUES ('q@x.com', 'whim')`,
		} {
			if _, err := pool.Exec(ctx, sql); err == nil {
				t.Errorf("accepted: %s", sql)
			}
		}
	})
	t.Run("read APIs return the transport status and the last event", func(t *testing.T) {
		recs, err := ListByCustomer(ctx, pool, "cus_test", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.ID == row && (r.Status != StatusDispatched || r.LastEvent != EventComplained) {
				t.Errorf("record %s: status %s, last event %q; want dispatched and complained", r.ID, r.Status, r.LastEvent)
			}
		}
		evs, err := EventsFor(ctx, pool, row)
		if err != nil || len(evs) < 4 || evs[0].Type != EventDelivered {
			t.Errorf("EventsFor: %d events, %v", len(evs), err)
		}
	})
}

// TestSuppressions_Lifecycle: an automatic entry never overwrites an
// existing one; a manual add replaces the reason; lifting returns the
// entry and logs who; lifting an address not on the list is
// ErrNotSuppressed; every change is in email_suppression_log.
func TestSuppressions_Lifecycle(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	if added, err := AddSuppression(ctx, pool, Suppression{Email: "a@example.com", Reason: "first", Source: SourceHardBounce}); err != nil || !added {
		t.Fatal(added, err)
	}
	if added, err := AddSuppression(ctx, pool, Suppression{Email: "A@example.com", Reason: "second", Source: SourceComplaint}); err != nil || added {
		t.Fatalf("automatic re-add: added %v, %v; want nothing written", added, err)
	}
	if s, _, _ := CheckSuppression(ctx, pool, "a@example.com"); s.Reason != "first" || s.Source != SourceHardBounce {
		t.Errorf("after the automatic re-add: %+v", s)
	}
	if added, err := AddSuppression(ctx, pool, Suppression{Email: "a@example.com", Reason: "operator says so", CreatedBy: "root"}); err != nil || !added {
		t.Fatal(added, err)
	}
	if s, _, _ := CheckSuppression(ctx, pool, "a@example.com"); s.Reason != "operator says so" || s.Source != SourceManual || s.CreatedBy != "root" {
		t.Errorf("after the manual add: %+v", s)
	}
	list, err := ListSuppressions(ctx, pool, SourceManual, 0)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := LiftSuppression(ctx, pool, "a@example.com", "alice", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := LiftSuppression(ctx, pool, "a@example.com", "alice", nil); !errors.Is(err, ErrNotSuppressed) {
		t.Fatalf("second lift: %v; want ErrNotSuppressed", err)
	}
	if _, ok, _ := CheckSuppression(ctx, pool, "a@example.com"); ok {
		t.Error("still suppressed after the lift")
	}
	var log []string
	rows, err := pool.Query(ctx, `SELECT action || ':' || source || ':' || actor FROM email_suppression_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		log = append(log, s)
	}
	want := "added:hard_bounce:|added:manual:root|lifted:manual:alice"
	if got := strings.Join(log, "|"); got != want {
		t.Errorf("log %q; want %q", got, want)
	}
}

// TestDispatch_SuppressedRowIsNotRendered: the claim-time check comes
// before the renderer, so a suppressed row costs no render (a custom
// renderer may fetch a PDF or call a branding service), and the pre-send
// re-check is only the safety net for suppressions added since.
func TestDispatch_SuppressedRowIsNotRendered(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	if err := Suppress(ctx, pool, "gone@example.com", "hard bounce"); err != nil {
		t.Fatal(err)
	}
	id := insertRow(t, pool, "raw", rawPayload("gone@example.com"))
	var rendered atomic.Int32
	d := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) {
		c.Renderer = RendererFunc(func(ctx context.Context, row *Row) (smtp.Message, error) {
			rendered.Add(1)
			return DefaultRenderer().Render(ctx, row)
		})
	})
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	if st := getRow(t, pool, id); st.Status != "failed" || rendered.Load() != 0 {
		t.Errorf("row %s, rendered %d times; want failed without a render", st.Status, rendered.Load())
	}
}

// TestRecordEvent_OrphanSuppressionBoundIsShipped100 pins the shipped
// hourly bound on orphan suppressions, 100 (README, OPERATIONS.md), as a
// literal: TestRecordEvent fills the bound from the constant, so it keeps
// passing whatever the constant says. With 99 orphan suppressions in the
// hour the next orphan bounce still suppresses; at 100 the one after is
// held.
func TestRecordEvent_OrphanSuppressionBoundIsShipped100(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO email_suppressions (email, reason, source)
	SELECT 'burst' || g || '@example.com', 'orphan hard bounce', 'hard_bounce' FROM generate_series(1, 99) g`); err != nil {
		t.Fatal(err)
	}
	policy := SuppressionPolicy{SuppressOrphans: true}
	for _, tc := range []struct {
		id, addr     string
		wantSuppress bool
	}{
		{"bound-100th", "hundredth@example.com", true},
		{"bound-101st", "one-too-many@example.com", false},
	} {
		r, err := RecordEvent(ctx, pool, Event{Type: EventBounced, BounceClass: BounceHard, Provider: "generic",
			ProviderEventID: tc.id, Recipient: tc.addr}, policy)
		if err != nil || !r.Event.Orphan() {
			t.Fatalf("%s: %+v, %v; want a stored orphan", tc.id, r, err)
		}
		if got := r.Suppressed != nil; got != tc.wantSuppress || r.OrphanHeld == tc.wantSuppress {
			t.Errorf("%s: suppressed %v, held %v; want suppressed %v (the shipped bound is 100 an hour)",
				tc.id, got, r.OrphanHeld, tc.wantSuppress)
		}
	}
}

// TestPruneOrphanEvents: the retention pass deletes orphan events older
// than the retention, and only those — a younger orphan may still be
// traced, and a correlated event is its row's timeline whatever its age.
// The chunk is 2 here, so three old orphans take two statements: the loop,
// not one capped DELETE, is what empties a backlog.
func TestPruneOrphanEvents(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	row := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	const retention = 30 * 24 * time.Hour
	events := []struct {
		id     string
		orphan bool
		age    string // how long ago it was received
		kept   bool
	}{
		{"orphan-31d", true, "31 days", false},
		{"orphan-45d", true, "45 days", false},
		{"orphan-400d", true, "400 days", false},
		{"orphan-29d", true, "29 days", true},
		{"orphan-new", true, "0 seconds", true},
		{"row-400d", false, "400 days", true},
		{"row-new", false, "0 seconds", true},
	}
	// The events are back-dated up to 400 days: those weeks must exist.
	if _, err := pool.Exec(ctx, `SELECT postbox_history_partitions('email_events', now() - interval '400 days', now())`); err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		ev := Event{Type: EventDelivered, Provider: "generic", ProviderEventID: e.id, Recipient: "ada@example.com"}
		if !e.orphan {
			ev.RowID = row
		}
		r, err := RecordEvent(ctx, pool, ev, SuppressionPolicy{})
		if err != nil || r.Event.Orphan() != e.orphan {
			t.Fatalf("%s: %+v, %v", e.id, r, err)
		}
		if _, err := pool.Exec(ctx, `UPDATE email_events SET received_at = now() - $2::interval WHERE provider_event_id = $1`, e.id, e.age); err != nil {
			t.Fatal(err)
		}
	}

	n, err := pruneOrphanEvents(ctx, pool, retention, 2)
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v; want the 3 orphans older than %s", n, err, retention)
	}
	for _, e := range events {
		var left bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM email_events WHERE provider_event_id = $1)`, e.id).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != e.kept {
			t.Errorf("%s (orphan %v, %s old): kept %v; want %v", e.id, e.orphan, e.age, left, e.kept)
		}
	}
	if n, err := PruneOrphanEvents(ctx, pool, retention); err != nil || n != 0 {
		t.Errorf("a second pass pruned %d, %v; want nothing left to prune", n, err)
	}
	for _, bad := range []time.Duration{0, -time.Hour} {
		if _, err := PruneOrphanEvents(ctx, pool, bad); err == nil {
			t.Errorf("retention %s accepted; a non-positive retention would delete every orphan", bad)
		}
	}
}
