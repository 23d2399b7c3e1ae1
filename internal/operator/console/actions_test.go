package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A POST that is forged, unconfirmed or malformed is refused with a clear
// error and changes nothing.
func TestActionsRefuseBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice := f.browser(t, "alice")
	token := alice.token("requeue-email", f.failedID)
	epToken := alice.token("replay-endpoint", f.badEP.ID)
	mallory := f.browser(t, "mallory")
	malloryToken := mallory.token("requeue-email", f.failedID)
	// Alice in a second browser: her user, its own session cookie. Its
	// token must not pass with the first browser's cookie.
	aliceElsewhereToken := f.browser(t, "alice").token("requeue-email", f.failedID)

	// Alice's browser, its cookie and her token, but another basic-auth
	// user: the token is bound to the user as well as the session.
	asMallory := &browser{t: t, c: alice.c, base: alice.base, user: "mallory"}

	eventsBefore := f.count(t, `SELECT count(*) FROM webhook_events`)
	for _, tc := range []struct {
		name   string
		b      *browser
		action string
		form   url.Values
		code   int
		want   string
	}{
		{"forged POST without a token", alice, "requeue-email", url.Values{"id": {f.failedID}, "confirm": {"yes"}}, 403, "CSRF token is missing or invalid"},
		{"forged POST with a made-up token", alice, "requeue-email", url.Values{"id": {f.failedID}, "confirm": {"yes"}, "csrf": {"AAAA"}}, 403, "CSRF"},
		{"another browser's token", alice, "requeue-email", url.Values{"id": {f.failedID}, "confirm": {"yes"}, "csrf": {malloryToken}}, 403, "CSRF"},
		{"the session's token, another user", asMallory, "requeue-email", url.Values{"id": {f.failedID}, "confirm": {"yes"}, "csrf": {token}}, 403, "CSRF"},
		{"no cookie (another browser)", f.browser(t, "alice"), "requeue-email", url.Values{"id": {f.failedID}, "confirm": {"yes"}, "csrf": {token}}, 403, "CSRF"},
		{"forged replay", alice, "replay-event", url.Values{"id": {f.eventID}, "confirm": {"yes"}}, 403, "CSRF"},
		{"forged disable", alice, "disable-endpoint", url.Values{"id": {f.goodEP.ID}, "confirm": {"yes"}}, 403, "CSRF"},
		{"the same user's token from another browser", alice, "requeue-email", url.Values{"id": {f.failedID}, "confirm": {"yes"}, "csrf": {aliceElsewhereToken}}, 403, "CSRF"},
		{"not confirmed", alice, "requeue-email", url.Values{"id": {f.failedID}, "csrf": {token}}, 400, "not confirmed"},
		{"confirm no", alice, "requeue-email", url.Values{"id": {f.failedID}, "confirm": {"no"}, "csrf": {token}}, 400, "not confirmed"},
		{"malformed UUID", alice, "requeue-email", url.Values{"id": {"1234-not-a-uuid"}, "confirm": {"yes"}, "csrf": {token}}, 400, "is not a row id (a UUID)"},
		{"unknown id", alice, "requeue-email", url.Values{"id": {"00000000-0000-4000-8000-000000000000"}, "confirm": {"yes"}, "csrf": {token}}, 404, "no such email"},
		{"not failed", alice, "requeue-email", url.Values{"id": {f.sentID}, "confirm": {"yes"}, "csrf": {token}}, 409, "send a new email instead"},
		{"since that does not parse", alice, "replay-endpoint", url.Values{"id": {f.badEP.ID}, "confirm": {"yes"}, "csrf": {epToken}, "since": {"last tuesday"}}, 400, `--since &#34;last tuesday&#34;: want an RFC3339 time`},
		{"empty since", alice, "replay-endpoint", url.Values{"id": {f.badEP.ID}, "confirm": {"yes"}, "csrf": {epToken}, "since": {""}}, 400, "--since is required"},
		{"unknown action", alice, "drop-table", url.Values{"id": {f.failedID}, "confirm": {"yes"}, "csrf": {token}}, 404, "No such action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := tc.b.do(http.MethodPost, "/console/do/"+tc.action, tc.form)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("POST %s: %d, want %d with %q:\n%s", tc.action, code, tc.code, tc.want, body)
			}
			if !strings.Contains(body, "Nothing was changed") && tc.code != 404 && tc.code != 409 {
				t.Errorf("the refusal does not say nothing was changed:\n%s", body)
			}
		})
	}
	if s := f.status(t, "email_outbox", f.failedID); s != "failed" {
		t.Errorf("after the refusals the failed email is %s", s)
	}
	if s := f.status(t, "email_outbox", f.sentID); s != "dispatched" {
		t.Errorf("after the refusals the sent email is %s", s)
	}
	if n := f.count(t, `SELECT count(*) FROM webhook_events`); n != eventsBefore {
		t.Errorf("the refusals made %d events", n-eventsBefore)
	}
	if n := f.count(t, `SELECT count(*) FROM webhook_endpoints WHERE enabled`); n != 3 {
		t.Errorf("after the refusals %d endpoints are enabled, want 3 (all but the one disabled for its 410)", n)
	}
	if !strings.Contains(f.logs.String(), "CSRF") {
		t.Error("the CSRF refusals were not logged")
	}

	t.Run("GET cannot act", func(t *testing.T) {
		code, _, _ := alice.do(http.MethodGet, "/console/do/requeue-email?id="+f.failedID+"&confirm=yes&csrf="+url.QueryEscape(token), nil)
		if code == http.StatusOK || code == http.StatusSeeOther {
			t.Fatalf("GET /console/do: %d", code)
		}
		if s := f.status(t, "email_outbox", f.failedID); s != "failed" {
			t.Fatalf("a GET changed the row to %s", s)
		}
	})
	t.Run("confirm page refuses a malformed id", func(t *testing.T) {
		if code, body := alice.get("/console/confirm/requeue-email?id=nope"); code != 400 || !strings.Contains(body, "UUID") {
			t.Fatalf("confirm with a malformed id: %d\n%s", code, body)
		}
	})
}

// Confirmed actions with the session's token do what they say, and each
// is logged with the basic-auth user.
func TestActionsChangeRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t, "alice")
	post := func(action, id string, extra url.Values) (int, string, string) {
		t.Helper()
		form := url.Values{"id": {id}, "confirm": {"yes"}, "csrf": {b.token(action, id)}}
		for k, v := range extra {
			form[k] = v
		}
		return b.do(http.MethodPost, "/console/do/"+action, form)
	}

	code, body, final := post("requeue-email", f.failedID, nil)
	if code != 200 || final != "/console/email/"+f.failedID || !strings.Contains(body, "requeued: pending, attempts 0") {
		t.Fatalf("requeue: %d at %s:\n%s", code, final, body)
	}
	if s := f.status(t, "email_outbox", f.failedID); s != "pending" {
		t.Fatalf("requeued row is %s", s)
	}
	// The requeue is in the row's log under the basic-auth user, and its
	// page shows it there.
	if n := f.count(t, `SELECT count(*) FROM email_requeues WHERE row_id = $1 AND actor = 'alice' AND from_status = 'failed'`, f.failedID); n != 1 {
		t.Errorf("%d requeues of the row by alice logged, want 1", n)
	}
	if code, page := b.get("/console/email/" + f.failedID); code != 200 || !strings.Contains(page, `<b class="requeued">requeued</b> by alice, from failed`) {
		t.Errorf("the email's page does not show its requeue: %d\n%s", code, page)
	}

	// The endpoint's failed delivery first: once the event's replay has a
	// delivery to it pending, its family is settled for that endpoint.
	code, body, _ = post("replay-endpoint", f.badEP.ID, url.Values{"since": {"2h"}})
	if code != 200 || !strings.Contains(body, "1 events replayed") {
		t.Fatalf("replay endpoint: %d:\n%s", code, body)
	}

	before := f.count(t, `SELECT count(*) FROM webhook_events WHERE replay_of = $1`, f.eventID)
	code, body, _ = post("replay-event", f.eventID, nil)
	if code != 200 || !strings.Contains(body, "replayed as") {
		t.Fatalf("replay: %d:\n%s", code, body)
	}
	if n := f.count(t, `SELECT count(*) FROM webhook_events WHERE replay_of = $1`, f.eventID); n != before+1 {
		t.Fatalf("replay made %d clones", n-before)
	}

	code, body, _ = post("requeue-webhook-outbox", f.failedOutboxID, nil)
	if code != 200 || f.status(t, "webhook_outbox", f.failedOutboxID) != "pending" {
		t.Fatalf("requeue webhook outbox: %d:\n%s", code, body)
	}

	if _, page := b.get("/console/delivery/" + f.badDelivery); !strings.Contains(page, "/confirm/requeue-delivery?id="+f.badDelivery) {
		t.Errorf("the failed delivery's page offers no requeue:\n%s", page)
	}
	events := f.count(t, `SELECT count(*) FROM webhook_events`)
	code, body, _ = post("requeue-delivery", f.badDelivery, nil)
	if code != 200 || f.status(t, "webhook_deliveries", f.badDelivery) != "pending" || !strings.Contains(body, "requeued: pending, attempts 0") {
		t.Fatalf("requeue delivery: %d:\n%s", code, body)
	}
	if n := f.count(t, `SELECT count(*) FROM webhook_events`); n != events {
		t.Errorf("a delivery requeue made %d events: it is not a replay", n-events)
	}

	code, body, _ = post("disable-endpoint", f.goodEP.ID, url.Values{"reason": {"maintenance"}})
	if code != 200 || !strings.Contains(body, "maintenance (alice)") {
		t.Fatalf("disable: %d:\n%s", code, body)
	}
	code, body, _ = post("enable-endpoint", f.goodEP.ID, nil)
	if code != 200 || !strings.Contains(body, "endpoint "+f.goodEP.ID+" enabled") {
		t.Fatalf("enable: %d:\n%s", code, body)
	}

	// Requeueing the suppressed row would fail it again at once: the
	// confirmation says so and offers lift-then-requeue; a plain failed
	// row's confirmation warns of nothing.
	if _, page := b.get("/console/confirm/requeue-email?id=" + f.suppressedID); !strings.Contains(page, "bounced@example.com is suppressed") ||
		!strings.Contains(page, "/confirm/lift-and-requeue-email?id="+f.suppressedID) {
		t.Errorf("requeue confirmation of a suppressed row neither warns nor offers the lift:\n%s", page)
	}
	if _, page := b.get("/console/confirm/requeue-email?id=" + f.failedID); strings.Contains(page, `id="warning"`) {
		t.Errorf("requeue confirmation of a row to an address not suppressed warns:\n%s", page)
	}

	// The suppressed row's page offers the lift; the lift takes the
	// address off the list, records who lifted it, and a second lift of
	// the same address is refused as not suppressed.
	if _, page := b.get("/console/email/" + f.suppressedID); !strings.Contains(page, "/confirm/lift-suppression?id="+f.suppressedID) {
		t.Errorf("the suppressed row's page offers no lift:\n%s", page)
	}
	code, body, _ = post("lift-suppression", f.suppressedID, nil)
	if code != 200 || !strings.Contains(body, "suppression of bounced@example.com lifted") {
		t.Fatalf("lift suppression: %d:\n%s", code, body)
	}
	if n := f.count(t, `SELECT count(*) FROM email_suppressions WHERE email = 'bounced@example.com'`); n != 0 {
		t.Errorf("lifted address still suppressed (%d rows)", n)
	}
	if n := f.count(t, `SELECT count(*) FROM email_suppression_log WHERE email = 'bounced@example.com' AND action = 'lifted' AND actor = 'alice'`); n != 1 {
		t.Errorf("%d log rows name alice as the lifter, want 1", n)
	}
	if code, body, _ = post("lift-suppression", f.suppressedID, nil); code != 404 || !strings.Contains(body, "not suppressed") {
		t.Errorf("second lift: %d, want 404 naming the address as not suppressed:\n%s", code, body)
	}

	// Lift-then-requeue: the address comes off the list and the row is
	// pending again, in one confirmed action.
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO email_suppressions (email, reason) VALUES ('bounced@example.com', 'hard bounce again')`)
	code, body, _ = post("lift-and-requeue-email", f.suppressedID, nil)
	if code != 200 || !strings.Contains(body, "suppression of bounced@example.com lifted; email "+f.suppressedID+" requeued") ||
		f.status(t, "email_outbox", f.suppressedID) != "pending" {
		t.Fatalf("lift and requeue: %d, row %s:\n%s", code, f.status(t, "email_outbox", f.suppressedID), body)
	}
	if n := f.count(t, `SELECT count(*) FROM email_suppressions WHERE email = 'bounced@example.com'`); n != 0 {
		t.Errorf("lift and requeue left the address suppressed")
	}

	logs := f.logs.String()
	for _, action := range []string{"requeue-email", "replay-event", "requeue-webhook-outbox", "disable-endpoint", "enable-endpoint", "replay-endpoint", "lift-suppression", "requeue-delivery"} {
		if !strings.Contains(logs, `msg="console: action done" component=console user=alice action=`+action+` id=`) {
			t.Errorf("no log line names alice for %s:\n%s", action, logs)
		}
	}

	t.Run("a crafted result message is not shown", func(t *testing.T) {
		_, body := b.get("/console/email/" + f.failedID + "?done=" + url.QueryEscape("all your rows were deleted") + "&sig=x")
		if strings.Contains(body, "all your rows were deleted") {
			t.Fatal("the console shows an unsigned result message")
		}
	})
}
