package story

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// Detection: which lookups an input gets, before any query.
func TestDetect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        string
		want      []Kind
		malformed bool
	}{
		{"2b2f9737-0cd9-4fb0-af33-d50c1422b3a5", idKinds, false},
		{"2B2F9737-0CD9-4FB0-AF33-D50C1422B3A5", idKinds, false},
		{"INV-1042", []Kind{KindInvoice, KindCustomer}, false},
		{"cus_42", []Kind{KindInvoice, KindCustomer}, false},
		{"ada@example.com", []Kind{KindRecipient}, false},
		{"Ada <ada@example.com>", []Kind{KindRecipient}, false},
		{"2024-01-05", []Kind{KindInvoice, KindCustomer}, false},                            // short: an application's id, not a broken UUID
		{"2b2f9737-0cd9-4fb0-af33-d50c1422b3a", nil, true},                                  // one digit short
		{"2b2f97370cd9-4fb0-af33-d50c1422b3a5", nil, true},                                  // a dash missing
		{"2b2f9737-0cd9-4fb0-af33-d50c1422b3a5x", []Kind{KindInvoice, KindCustomer}, false}, // not hex: an application id
		{"1234abcd-12-1234-1234-1234567890ab", nil, true},
	} {
		got, err := detect(tc.in)
		if tc.malformed {
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "not a UUID") {
				t.Errorf("detect(%q) = %v, %v; want ErrMalformed", tc.in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("detect(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		kind Kind
		ok   bool
	}{
		{"INV-1", KindEmail, false}, {"INV-1", KindEvent, false}, {"INV-1", KindInvoice, true},
		{"2b2f9737-0cd9-4fb0-af33-d50c1422b3a5", KindDelivery, true}, {"x", KindRecipient, true},
	} {
		if err := checkForced(tc.in, tc.kind); (err == nil) != tc.ok {
			t.Errorf("checkForced(%q, %s) = %v", tc.in, tc.kind, err)
		}
	}
	if _, err := ParseKind("bogus"); !errors.Is(err, ErrMalformed) {
		t.Errorf("ParseKind(bogus) = %v", err)
	}
	for _, k := range Kinds {
		if got, err := ParseKind(string(k)); err != nil || got != k {
			t.Errorf("ParseKind(%s) = %v, %v", k, got, err)
		}
	}
}

// Find reads each kind of input as what it names, says what it searched
// when nothing matches, and tells a secret's state, never its value.
func TestFind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	one := func(sql string, args ...any) string {
		t.Helper()
		var id string
		if err := db.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return id
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ring, err := outbox.ParseKeyRing("k1:" + base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := (&outbox.Enqueuer{Keys: ring}).Enqueue(ctx, tx, outbox.Email{Kind: outbox.KindPasswordReset, CustomerID: "cus_1",
		Payload: outbox.Payload{To: "Ada <Ada@Example.com>", Subject: "Reset", PasswordResetURL: "https://x/SECRET-sealed"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	present := one(`INSERT INTO email_outbox (kind, customer_id, invoice_id, payload, status, attempts, last_error)
		VALUES ('invoice', 'cus_1', 'INV-1', '{"to":"ada@example.com","subject":"I","invoice_number":"1","setup_url":"https://x/SECRET-plain","public_token":"SECRET-tok"}',
		'failed', 4, '550 no') RETURNING id`)
	scrubbed := one(`INSERT INTO email_outbox (kind, customer_id, invoice_id, payload, status, attempts, dispatched_at)
		VALUES ('invoice', 'cus_1', 'INV-1', '{"to":"ada@example.com","subject":"I","invoice_number":"1"}', 'dispatched', 1, now()) RETURNING id`)
	// Marked before the scrub existed: a sent row that still holds a key.
	legacy := one(`INSERT INTO email_outbox (customer_id, payload, status, attempts, dispatched_at)
		VALUES ('cus_2', '{"to":"bob@example.com","subject":"S","text":"t","invite_url":"https://x/SECRET-legacy"}', 'dispatched', 1, now()) RETURNING id`)
	ep, err := webhook.CreateEndpoint(ctx, db, webhook.Settings{}, webhook.EndpointParams{URL: "https://hooks.example.com/in"})
	if err != nil {
		t.Fatal(err)
	}
	event := one(`INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.paid', '{}') RETURNING id`)
	clone := one(`INSERT INTO webhook_events (event_type, payload, replay_of) VALUES ('invoice.paid', '{}', $1) RETURNING id`, event)
	delivery := one(`INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, last_error) VALUES ($1, $2, 'failed', 2, 'HTTP 500') RETURNING id`, event, ep.ID)
	guarded := one(`INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, last_error) VALUES ($1, $2, 'failed', 1, $3) RETURNING id`,
		clone, ep.ID, (&webhook.AddressError{Addr: netip.MustParseAddr("127.0.0.1"), Range: "loopback"}).Error())
	one(`INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, response_excerpt) VALUES
		($1, 1, 500, 12, 'oops'), ($1, 2, 503, 20, 'later') RETURNING delivery_id::text`, delivery)
	whOutbox := one(`INSERT INTO webhook_outbox (event_type, payload, status, last_error) VALUES ('x.y', '{}', 'failed', 'boom') RETURNING id`)

	for _, tc := range []struct {
		q     string
		kind  Kind
		want  Kind
		check func(t *testing.T, s Story)
	}{
		{sealed, "", KindEmail, func(t *testing.T, s Story) {
			e := s.Emails[0]
			if !slices.Equal(e.Secrets, []outbox.SecretField{{Key: "password_reset_url", State: "sealed"}}) || e.Fix != "none needed: the workers send it when due" {
				t.Errorf("sealed row: %+v", e)
			}
		}},
		{present, "", KindEmail, func(t *testing.T, s Story) {
			e := s.Emails[0]
			if !slices.Equal(e.Secrets, []outbox.SecretField{{Key: "setup_url", State: "present"}, {Key: "public_token", State: "present"}}) ||
				!e.Requeueable || e.Fix != "worker requeue email "+present {
				t.Errorf("plaintext failed row: %+v", e)
			}
		}},
		{scrubbed, "", KindEmail, func(t *testing.T, s Story) {
			if e := s.Emails[0]; len(e.Secrets) != 6 || e.Secrets[5] != (outbox.SecretField{Key: "pdf", State: "scrubbed"}) ||
				e.Requeueable || !strings.Contains(e.Fix, "send a new email") {
				t.Errorf("sent row: %+v", e)
			}
		}},
		{legacy, "", KindEmail, func(t *testing.T, s Story) {
			if e := s.Emails[0]; !slices.Contains(e.Secrets, outbox.SecretField{Key: "invite_url", State: "present"}) ||
				!slices.Contains(e.Secrets, outbox.SecretField{Key: "setup_url", State: "scrubbed"}) {
				t.Errorf("legacy sent row: %+v", e.Secrets)
			}
		}},
		{"INV-1", "", KindInvoice, func(t *testing.T, s Story) {
			if len(s.Emails) != 2 || s.Emails[0].ID != scrubbed || s.Emails[1].ID != present {
				t.Errorf("invoice: %+v", s.Emails)
			}
		}},
		{"cus_1", "", KindCustomer, func(t *testing.T, s Story) {
			if len(s.Emails) != 3 {
				t.Errorf("customer: %d emails", len(s.Emails))
			}
		}},
		{"INV-1", KindCustomer, "", nil}, // forced: no customer INV-1
		{"ADA@example.com", "", KindRecipient, func(t *testing.T, s Story) {
			if len(s.Emails) != 3 { // "Ada <Ada@Example.com>" is ada@example.com too
				t.Errorf("recipient: %d emails", len(s.Emails))
			}
		}},
		{"da@example.com", "", "", nil}, // a substring of the address is not the address
		{event, "", KindEvent, func(t *testing.T, s Story) {
			e := s.Event
			if len(e.Deliveries) != 1 || len(e.Deliveries[0].Log) != 2 || e.Deliveries[0].Log[1].StatusCode != 503 ||
				e.Deliveries[0].Log[1].Excerpt != "later" || len(e.Replays) != 1 || e.Replays[0].ID != clone {
				t.Errorf("event: %+v", e)
			}
		}},
		{clone, "", KindEvent, func(t *testing.T, s Story) {
			if s.Event.ReplayOf != event || len(s.Event.Replays) != 1 || s.Event.Replays[0].ID != event {
				t.Errorf("clone: %+v", s.Event)
			}
		}},
		{delivery, "", KindDelivery, func(t *testing.T, s Story) {
			if s.Delivery.EndpointURL != ep.URL || len(s.Delivery.Log) != 2 {
				t.Errorf("delivery: %+v", s.Delivery)
			}
			// A failed delivery is requeued to its own endpoint, not
			// replayed as a new event to every endpoint.
			if !strings.HasPrefix(s.DeliveryFix, "worker requeue delivery "+delivery) {
				t.Errorf("delivery fix %q; want worker requeue delivery %s", s.DeliveryFix, delivery)
			}
		}},
		{guarded, "", KindDelivery, func(t *testing.T, s Story) {
			if !strings.Contains(s.DeliveryFix, "SSRF guard refuses") || !strings.HasSuffix(s.DeliveryFix, "then worker requeue delivery "+guarded) {
				t.Errorf("fix for a delivery the SSRF guard refused: %q; want what to change, then the requeue", s.DeliveryFix)
			}
		}},
		{ep.ID, "", KindEndpoint, func(t *testing.T, s Story) {
			if s.Endpoint.ConsecutiveFailures != 2 || s.Endpoint.Endpoint.Secret != "" {
				t.Errorf("endpoint: %+v", s.Endpoint)
			}
		}},
		{whOutbox, "", KindWebhookOutbox, func(t *testing.T, s Story) {
			if s.WebhookOutbox.Status != "failed" || s.WebhookOutbox.LastError != "boom" {
				t.Errorf("webhook outbox: %+v", s.WebhookOutbox)
			}
		}},
		{event, KindEmail, "", nil}, // an event id forced as an email: not found
	} {
		t.Run(string(tc.want)+"_"+tc.q, func(t *testing.T) {
			s, err := Find(ctx, db, tc.q, tc.kind)
			if tc.want == "" {
				var nf *NotFoundError
				if !errors.As(err, &nf) || !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), tc.q) {
					t.Fatalf("Find(%q, %q) = %+v, %v; want a *NotFoundError", tc.q, tc.kind, s, err)
				}
				return
			}
			if err != nil || s.Kind != tc.want {
				t.Fatalf("Find(%q, %q) = kind %q, %v; want %q", tc.q, tc.kind, s.Kind, err, tc.want)
			}
			tc.check(t, s)
			var b strings.Builder
			if err := WriteText(&b, s); err != nil || strings.Contains(b.String(), "SECRET-") || b.Len() < 40 {
				t.Errorf("WriteText: %v\n%s", err, b.String())
			}
		})
	}

	t.Run("not found names what was searched", func(t *testing.T) {
		_, err := Find(ctx, db, "00000000-0000-4000-8000-000000000000", "")
		want := `nothing matches "00000000-0000-4000-8000-000000000000": searched email_outbox by id, webhook_events by id, ` +
			`webhook_deliveries by id, webhook_endpoints by id, webhook_outbox by id`
		if err == nil || err.Error() != want {
			t.Fatalf("Find(unknown) = %v\nwant %s", err, want)
		}
	})
	t.Run("empty input", func(t *testing.T) {
		if _, err := Find(ctx, db, "  ", ""); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Find(blank) = %v", err)
		}
	})
	t.Run("shift jobs that named the row", func(t *testing.T) {
		var job int64
		err := db.QueryRow(ctx, `INSERT INTO river_job (kind, args, metadata, state, max_attempts, queue, finalized_at)
			VALUES ($1, '{}', jsonb_build_object('output', jsonb_build_object('sent_ids', jsonb_build_array($2::text))),
			'completed', 1, 'postbox_r_host_1', now()) RETURNING id`, ShiftKind, scrubbed).Scan(&job)
		if err != nil {
			t.Fatal(err)
		}
		// A shift that named other rows only is not the story's; one that
		// failed the row is, newest first.
		var failed int64
		err = db.QueryRow(ctx, `WITH other AS (INSERT INTO river_job (kind, args, metadata, state, max_attempts, queue, finalized_at)
			VALUES ($1, '{}', '{"output": {"sent_ids": ["00000000-0000-4000-8000-000000000001"]}}', 'completed', 1, 'postbox_r_host_1', now()))
			INSERT INTO river_job (kind, args, metadata, state, max_attempts, queue, finalized_at)
			VALUES ($1, '{}', jsonb_build_object('output', jsonb_build_object('failed_ids', jsonb_build_array($2::text))),
			'completed', 1, 'postbox_r_host_2', now()) RETURNING id`, ShiftKind, scrubbed).Scan(&failed)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Find(ctx, db, "INV-1", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Jobs) != 2 || s.Jobs[0] != (JobRef{ID: failed, Queue: "postbox_r_host_2", State: "completed",
			FinalizedAt: s.Jobs[0].FinalizedAt, RowID: scrubbed, Outcome: "failed"}) || s.Jobs[1] != (JobRef{ID: job, Queue: "postbox_r_host_1", State: "completed",
			FinalizedAt: s.Jobs[1].FinalizedAt, RowID: scrubbed, Outcome: "sent"}) {
			t.Fatalf("jobs: %+v", s.Jobs)
		}
	})
}

// Text Postgres cannot take as a parameter names nothing: it is refused as
// malformed, whatever the kind, not passed on as the database's error.
func TestFind_TextPostgresRefusesIsMalformed(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	for _, q := range []string{"\xff", "a\x00b", "\xc0\xaf", "cus_\xff"} {
		for _, k := range []Kind{"", KindInvoice, KindCustomer, KindRecipient} {
			t.Run(fmt.Sprintf("%q as %q", q, k), func(t *testing.T) {
				t.Parallel()
				_, err := Find(context.Background(), db, q, k)
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Find(%q, %q) = %v, want ErrMalformed", q, k, err)
				}
			})
		}
	}
}

// An email's story carries what came back after the send: the provider's
// events, oldest first, with the newest as LastEvent, and the suppression
// the hard bounce added — while Status stays the transport's "dispatched".
func TestFind_EmailEventsAndSuppression(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var id string
	if err := db.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, status, attempts, dispatched_at)
		VALUES ('cus_5', '{"to":"Grace <grace@example.com>","subject":"Receipt","text":"x"}', 'dispatched', 1, now())
		RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	delivered := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	for _, e := range []outbox.Event{
		{RowID: id, Type: outbox.EventDelivered, Provider: "postmark", ProviderEventID: "pm-1", Recipient: "grace@example.com", OccurredAt: &delivered},
		{RowID: id, Type: outbox.EventBounced, BounceClass: outbox.BounceHard, Provider: "postmark", ProviderEventID: "pm-2",
			Recipient: "grace@example.com", Detail: "550 5.1.1 mailbox gone"},
	} {
		if _, err := outbox.RecordEvent(ctx, db, e, outbox.SuppressionPolicy{}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Find(ctx, db, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Emails) != 1 {
		t.Fatalf("%d emails", len(s.Emails))
	}
	e := s.Emails[0]
	if e.Status != "dispatched" || e.LastEvent != "bounced" || len(e.Events) != 2 ||
		e.Events[0].Type != "delivered" || !e.Events[0].At.Equal(delivered) ||
		e.Events[1].Type != "bounced" || e.Events[1].BounceClass != "hard" || e.Events[1].Detail != "550 5.1.1 mailbox gone" {
		t.Errorf("events: status %s, last %q, %+v", e.Status, e.LastEvent, e.Events)
	}
	if !e.Suppressed || e.Suppression == nil || e.Suppression.SourceRow != id {
		t.Errorf("the hard bounce did not show as the recipient's suppression: %+v", e.Suppression)
	}
	var text strings.Builder
	if err := WriteText(&text, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"delivery events:", "bounced (hard)", "via postmark", "SUPPRESSED:", "from row " + id,
		"#1  no outcome recorded"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("printed story lacks %q:\n%s", want, text.String())
		}
	}
}

// An email's story lists each recorded attempt with its time and outcome,
// and names the trace the row was enqueued in.
func TestFind_EmailAttemptLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var id string
	if err := db.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, attempts, traceparent)
		VALUES ('cus_6', '{"to":"lin@example.com","subject":"Receipt","text":"x"}', 1,
		'00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Mark(ctx, db, id, outbox.Result{Outcome: outbox.OutcomeRetry, RetryIn: time.Minute, Err: errors.New("421 4.7.0 try later")}); err != nil {
		t.Fatal(err)
	}
	s, err := Find(ctx, db, id, "")
	if err != nil {
		t.Fatal(err)
	}
	log := s.Emails[0].AttemptLog
	if len(log) != 1 || log[0].Attempt != 1 || log[0].Outcome != outbox.OutcomeRetry || log[0].Error != "421 4.7.0 try later" {
		t.Fatalf("attempt log %+v", log)
	}
	var text strings.Builder
	if err := WriteText(&text, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "#1  ") || !strings.Contains(text.String(), "retry: 421 4.7.0 try later") {
		t.Errorf("printed story lacks the attempt:\n%s", text.String())
	}
	// The trace it was enqueued in, to find its attempts' spans by.
	if s.Emails[0].TraceID != "0af7651916cd43dd8448eb211c80319c" || !strings.Contains(text.String(), ", trace 0af7651916cd43dd8448eb211c80319c") {
		t.Errorf("trace id %q; printed story:\n%s", s.Emails[0].TraceID, text.String())
	}
}

// After a requeue the story shows the requeue itself (who, from which
// state) between the attempts before it and after it, counts attempts both
// ways, and takes none of the later attempts for unmarked ones.
func TestFind_EmailRequeueInTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var id string
	if err := db.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, attempts)
		VALUES ('cus_7', '{"to":"lin@example.com","subject":"Receipt","text":"x"}', 1) RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Mark(ctx, db, id, outbox.Result{Outcome: outbox.OutcomeFailed, Err: errors.New("550 5.1.1 no such user")}); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Requeue(ctx, db, id, "alice"); err != nil {
		t.Fatal(err)
	}
	// The claim of the attempt after the requeue, then its mark.
	if _, err := db.Exec(ctx, `UPDATE email_outbox SET attempts = attempts + 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Mark(ctx, db, id, outbox.Result{Outcome: outbox.OutcomeSent}); err != nil {
		t.Fatal(err)
	}
	s, err := Find(ctx, db, id, "")
	if err != nil {
		t.Fatal(err)
	}
	e := s.Emails[0]
	if e.Attempts != 1 || e.PriorAttempts != 1 || len(e.AttemptLog) != 3 {
		t.Fatalf("attempts %d, prior %d, log %+v; want 1, 1 and three entries", e.Attempts, e.PriorAttempts, e.AttemptLog)
	}
	var text strings.Builder
	if err := WriteText(&text, s); err != nil {
		t.Fatal(err)
	}
	got := text.String()
	for _, want := range []string{"#1  ", "failed: 550 5.1.1 no such user", "requeued  ", "by alice, from failed", "#2  ",
		"1 attempt since its requeue, 2 in all", "after 1 attempt since its requeue, 2 in all"} {
		if !strings.Contains(got, want) {
			t.Errorf("printed story lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "no outcome recorded") || strings.Index(got, "requeued  ") > strings.Index(got, "#2  ") {
		t.Errorf("printed story misreads the log after the requeue:\n%s", got)
	}
}
