package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A scheduled email's page says "scheduled for" and offers Cancel…; the
// confirmed POST with the session's token cancels it under the basic-auth
// user, and a POST without the token changes nothing. A pending
// webhook_outbox row is cancelled the same way.
func TestCancelActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	b := f.browser(t, "alice")
	var emailID, hookID string
	if err := f.pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
		VALUES ('cus_7', '{"to":"ada@example.com","subject":"Trial ends","text":"x"}', now() + interval '3 days') RETURNING id`).Scan(&emailID); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload, next_attempt_at)
		VALUES ('trial.ending', '{}', now() + interval '3 days') RETURNING id`).Scan(&hookID); err != nil {
		t.Fatal(err)
	}
	if code, page := b.get("/console/email/" + emailID); code != 200 || !strings.Contains(page, "scheduled for ") ||
		!strings.Contains(page, "/confirm/cancel-email?id="+emailID) {
		t.Fatalf("scheduled email's page: %d\n%s", code, page)
	}
	if code, page := b.get("/console/webhook-outbox/" + hookID); code != 200 || !strings.Contains(page, "scheduled for ") ||
		strings.Contains(page, "next attempt") {
		t.Fatalf("scheduled webhook_outbox row's page: %d; want \"scheduled for\", not \"next attempt\"\n%s", code, page)
	}
	if code, page := b.get("/console/confirm/cancel-email?id=" + emailID); code != 200 || !strings.Contains(page, "never sent") {
		t.Fatalf("confirmation page: %d\n%s", code, page)
	}

	forged := url.Values{"id": {emailID}, "confirm": {"yes"}}
	if code, body, _ := b.do(http.MethodPost, "/console/do/cancel-email", forged); code != 403 || !strings.Contains(body, "CSRF") {
		t.Fatalf("POST without a token: %d\n%s", code, body)
	}
	if s := f.status(t, "email_outbox", emailID); s != "pending" {
		t.Fatalf("after the forged POST the email is %s", s)
	}

	for _, tc := range []struct{ action, id, table, done string }{
		{"cancel-email", emailID, "email_outbox", "cancelled: it will not be sent"},
		{"cancel-webhook-outbox", hookID, "webhook_outbox", "cancelled: it will not be fanned out"},
	} {
		form := url.Values{"id": {tc.id}, "confirm": {"yes"}, "csrf": {b.token(tc.action, tc.id)}}
		code, body, _ := b.do(http.MethodPost, "/console/do/"+tc.action, form)
		if code != 200 || !strings.Contains(body, tc.done) {
			t.Fatalf("%s: %d\n%s", tc.action, code, body)
		}
		if n := f.count(t, `SELECT count(*) FROM `+tc.table+` WHERE id = $1 AND status = 'cancelled' AND cancelled_by = 'alice'`, tc.id); n != 1 {
			t.Errorf("%s: the row is not cancelled by alice", tc.action)
		}
		// Again: refused with the reason, 409.
		code, body, _ = b.do(http.MethodPost, "/console/do/"+tc.action, form)
		if code != 409 || !strings.Contains(body, "already cancelled") {
			t.Errorf("%s again: %d\n%s", tc.action, code, body)
		}
	}
}
