package mailevents

import (
	"net/http"
	"strings"
	"testing"

	"github.com/postbox/postbox/outbox"
)

var postmarkSettings = Settings{PostmarkUsername: "postmark", PostmarkPassword: "s3cret-webhook-pass"}

// postmarkBounce is Postmark's documented bounce webhook, with the
// original message's headers in Content (the "include bounce content"
// option), which is where postbox's X-Postbox-Row travels.
func postmarkBounce(id, typ, email, rowID string) string {
	return `{
  "RecordType": "Bounce",
  "MessageStream": "outbound",
  "ID": ` + id + `,
  "Type": "` + typ + `",
  "TypeCode": 1,
  "Name": "Hard bounce",
  "Tag": "invoice",
  "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
  "ServerID": 23,
  "Description": "The server was unable to deliver your message (ex: unknown user, mailbox not found).",
  "Details": "smtp;550 5.1.1 The email account that you tried to reach does not exist.",
  "Email": "` + email + `",
  "From": "billing@example.com",
  "BouncedAt": "2026-11-30T16:33:54.9070259Z",
  "DumpAvailable": true,
  "Inactive": true,
  "CanActivate": true,
  "Subject": "Invoice INV-42",
  "Content": "Return-Path: <>\nMessage-ID: <report-1@mx.example.net>\nContent-Type: multipart/report\n\n--b\nMessage-ID: <` + rowID + `@example.com>\nX-Postbox-Row: ` + rowID + `\nSubject: Invoice INV-42\n\nYour password reset link: https://app.example.com/reset?token=SECRET\n"
}`
}

func postmarkDelivery(email, messageID string) string {
	return `{
  "RecordType": "Delivery",
  "ServerID": 23,
  "MessageStream": "outbound",
  "MessageID": "` + messageID + `",
  "Recipient": "` + email + `",
  "Tag": "invoice",
  "DeliveredAt": "2026-11-30T16:30:00Z",
  "Details": "Test delivery webhook details",
  "Metadata": {"a_key": "a_value"}
}`
}

func postmarkComplaintBody(id, email, rowID string) string {
	return `{
  "RecordType": "SpamComplaint",
  "MessageStream": "outbound",
  "ID": ` + id + `,
  "Type": "SpamComplaint",
  "TypeCode": 512,
  "Name": "Spam complaint",
  "Tag": "invoice",
  "MessageID": "00000000-0000-0000-0000-000000000000",
  "Metadata": {"postbox_row": "` + rowID + `"},
  "ServerID": 1234,
  "Description": "",
  "Details": "Test spam complaint details",
  "Email": "` + email + `",
  "From": "billing@example.com",
  "BouncedAt": "2026-11-30T16:33:54.9070259Z",
  "DumpAvailable": true,
  "Inactive": true,
  "CanActivate": false,
  "Subject": "Invoice INV-42",
  "Content": "<Abuse report dump>"
}`
}

// TestPostmark: the Postmark endpoint with Postmark-shaped payloads. The
// bad requests (no or wrong credentials, malformed, oversized) get their
// status and change nothing; a bounce correlates by the X-Postbox-Row in
// its content, suppresses the address and keeps no content (it may quote a
// secret link); its replay is recorded once; a delivery correlates by
// Postmark's MessageID to the row the bounce named; a complaint by its
// metadata; an unknown row is an orphan, stored and counted.
func TestPostmark(t *testing.T) {
	t.Parallel()
	f := newFixture(t, postmarkSettings, SNSOptions{})
	row := f.sentRow("ada@example.com")
	user, pass := postmarkSettings.PostmarkUsername, postmarkSettings.PostmarkPassword

	bad := []struct {
		name       string
		body       string
		user, pass string
		want       int
	}{
		{"no credentials", postmarkBounce("1", "HardBounce", "ada@example.com", row), "", "", http.StatusUnauthorized},
		{"wrong password", postmarkBounce("1", "HardBounce", "ada@example.com", row), user, "guess", http.StatusUnauthorized},
		{"wrong user", postmarkBounce("1", "HardBounce", "ada@example.com", row), "admin", pass, http.StatusUnauthorized},
		{"malformed JSON", `{"RecordType": "Bounce", "ID": `, user, pass, http.StatusBadRequest},
		{"trailing bytes", postmarkBounce("9", "HardBounce", "ada@example.com", row) + "garbage", user, pass, http.StatusBadRequest},
		{"two objects", postmarkBounce("10", "HardBounce", "ada@example.com", row) + postmarkBounce("11", "HardBounce", "ceo@example.com", row), user, pass, http.StatusBadRequest},
		{"not Postmark's shape", `{"hello": "world"}`, user, pass, http.StatusBadRequest},
		{"bounce without email", `{"RecordType": "Bounce", "ID": 7, "Type": "HardBounce"}`, user, pass, http.StatusBadRequest},
		{"bad recipient", postmarkBounce("8", "HardBounce", "not an address", row), user, pass, http.StatusBadRequest},
		{"oversized", string(oversized()), user, pass, http.StatusRequestEntityTooLarge},
	}
	before := f.state()
	for _, tc := range bad {
		if code, body := f.post(ProviderPostmark, []byte(tc.body), nil, tc.user, tc.pass); code != tc.want {
			t.Errorf("%s: %d %q; want %d", tc.name, code, body, tc.want)
		}
		if got := f.state(); got != before {
			t.Fatalf("%s changed the database: %+v → %+v", tc.name, before, got)
		}
	}

	code, body := f.post(ProviderPostmark, []byte(postmarkBounce("4323372036854775807", "HardBounce", "Ada@Example.com", row)), nil, user, pass)
	if code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1}) {
		t.Fatalf("bounce: %d %q", code, body)
	}
	evs := f.events(row)
	if len(evs) != 1 || evs[0].Type != outbox.EventBounced || evs[0].BounceClass != outbox.BounceHard ||
		evs[0].ProviderEventID != "bounce:4323372036854775807" || evs[0].Recipient != "ada@example.com" || evs[0].OccurredAt == nil {
		t.Fatalf("events %+v", evs)
	}
	if strings.Contains(evs[0].RawExcerpt, "SECRET") || !strings.Contains(evs[0].RawExcerpt, `"RecordType":"Bounce"`) {
		t.Errorf("raw excerpt keeps the content or lost the record: %q", evs[0].RawExcerpt)
	}
	if s, ok := f.suppression("ada@example.com"); !ok || s.Source != outbox.SourceHardBounce || s.SourceRow != row ||
		!strings.Contains(s.Reason, "5.1.1") {
		t.Errorf("suppression %+v, %v; want a hard bounce from row %s", s, ok, row)
	}
	after := f.state()
	code, body = f.post(ProviderPostmark, []byte(postmarkBounce("4323372036854775807", "HardBounce", "ada@example.com", row)), nil, user, pass)
	if code != http.StatusOK || answerOf(t, body) != (answer{Duplicates: 1}) || f.state() != after {
		t.Fatalf("replay: %d %q, state %+v → %+v; want 200, one duplicate, nothing written", code, body, after, f.state())
	}

	// The delivery names no row; Postmark's MessageID ties it to the
	// bounce's row.
	code, body = f.post(ProviderPostmark, []byte(postmarkDelivery("ada@example.com", "883953f4-6105-42a2-a16a-77a8eac79483")), nil, user, pass)
	if code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1}) {
		t.Fatalf("delivery: %d %q", code, body)
	}
	if evs := f.events(row); len(evs) != 2 || evs[1].Type != outbox.EventDelivered {
		t.Fatalf("after the delivery: %+v", evs)
	}

	row2 := f.sentRow("bob@example.com")
	if code, body := f.post(ProviderPostmark, []byte(postmarkComplaintBody("42", "bob@example.com", row2)), nil, user, pass); code != http.StatusOK {
		t.Fatalf("complaint: %d %q", code, body)
	}
	if evs := f.events(row2); len(evs) != 1 || evs[0].Type != outbox.EventComplained {
		t.Fatalf("complaint events %+v", evs)
	}
	if s, ok := f.suppression("bob@example.com"); !ok || s.Source != outbox.SourceComplaint {
		t.Errorf("complaint suppression %+v, %v", s, ok)
	}

	// A soft bounce counts, and suppresses only at the limit.
	if code, _ := f.post(ProviderPostmark, []byte(postmarkBounce("99", "SoftBounce", "cy@example.com", row)), nil, user, pass); code != http.StatusOK {
		t.Fatal(code)
	}
	if _, ok := f.suppression("cy@example.com"); ok {
		t.Error("one soft bounce suppressed the address")
	}
	// Transient is Postmark's "delayed": a deferral, not a bounce.
	if code, _ := f.post(ProviderPostmark, []byte(postmarkBounce("100", "Transient", "dee@example.com", row)), nil, user, pass); code != http.StatusOK {
		t.Fatal(code)
	}
	if evs := f.events(row); evs[len(evs)-1].Type != outbox.EventDeferred || evs[len(evs)-1].BounceClass != "" {
		t.Errorf("a Transient bounce recorded as %s/%s; want deferred", evs[len(evs)-1].Type, evs[len(evs)-1].BounceClass)
	}
	// Opens and clicks are not delivery events: 200, nothing recorded.
	before = f.state()
	if code, _ := f.post(ProviderPostmark, []byte(`{"RecordType": "Open", "MessageID": "x", "Recipient": "a@b.c"}`), nil, user, pass); code != http.StatusOK || f.state() != before {
		t.Errorf("an Open: %d, state changed %v", code, f.state() != before)
	}

	orphansBefore := f.orphanCount(ProviderPostmark)
	unknown := strings.Replace(postmarkBounce("5", "HardBounce", "dee@example.com", "6f1c8c38-1f0e-4c53-9a5e-3f4d2b8a9c10"),
		"883953f4-6105-42a2-a16a-77a8eac79483", "0f0e0d0c-0000-4000-8000-000000000001", 1)
	code, body = f.post(ProviderPostmark, []byte(unknown), nil, user, pass)
	if code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1, Orphans: 1}) {
		t.Fatalf("unknown row: %d %q", code, body)
	}
	orphans, err := outbox.ListEvents(testCtx(t), f.pool, outbox.EventFilter{OrphansOnly: true})
	if err != nil || len(orphans) != 1 || orphans[0].Ref != "6f1c8c38-1f0e-4c53-9a5e-3f4d2b8a9c10" {
		t.Fatalf("orphans %+v, %v", orphans, err)
	}
	if got := f.orphanCount(ProviderPostmark); got != orphansBefore+1 {
		t.Errorf("orphan counter %v → %v; want one more", orphansBefore, got)
	}
	if got := f.metric("postbox_email_events_total", "hard", ProviderPostmark, "bounced"); got != 2 {
		t.Errorf("postbox_email_events_total{postmark,bounced,hard} = %v; want 2 (the replay not counted)", got)
	}
	if got := f.state().dispatched; got != 2 {
		t.Errorf("%d rows dispatched; events never change a row's status", got)
	}
}

// TestEndpointsNotConfigured answer 404 and write nothing.
func TestEndpointsNotConfigured(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Settings{}, SNSOptions{})
	for _, p := range []string{ProviderPostmark, ProviderSES, ProviderGeneric} {
		if code, _ := f.post(p, []byte(`{}`), nil, "", ""); code != http.StatusNotFound {
			t.Errorf("%s unconfigured: %d; want 404", p, code)
		}
	}
	if f.state() != (state{}) {
		t.Error("an unconfigured endpoint wrote")
	}
}
