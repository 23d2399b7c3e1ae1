package mailevents

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
)

const genericSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// signed is the Standard Webhooks headers for body, as a sender with
// secret would send them at ts.
func signed(t *testing.T, secret, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

// TestGeneric: the Standard Webhooks endpoint. A bad signature, a
// signature by another secret, a stale timestamp, missing headers, a
// malformed or oversized body change nothing; a signed event correlates by
// row id or Message-ID and suppresses; its replay (same webhook-id) is
// recorded once; an unknown row is an orphan.
func TestGeneric(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Settings{GenericSecret: genericSecret}, SNSOptions{})
	row := f.sentRow("ada@example.com")
	now := time.Now()
	bounce := mustJSON(t, GenericEvent{Type: outbox.EventBounced, BounceClass: outbox.BounceHard,
		MessageID: "<" + row + "@example.com>", Recipient: "ada@example.com", Detail: "550 5.1.1 user unknown",
		OccurredAt: now.UTC().Format(time.RFC3339)})

	tampered := signed(t, genericSecret, "msg_1", now, bounce)
	bad := []struct {
		name   string
		body   []byte
		header http.Header
		want   int
	}{
		{"unsigned", bounce, http.Header{}, http.StatusUnauthorized},
		{"another secret", bounce, signed(t, "whsec_"+"QW5vdGhlclNlY3JldEFub3RoZXJTZWNyZXQ=", "msg_1", now, bounce), http.StatusUnauthorized},
		{"tampered body", append(append([]byte(nil), bounce[:len(bounce)-1]...), `,"detail":"x"}`...), tampered, http.StatusUnauthorized},
		{"stale timestamp", bounce, signed(t, genericSecret, "msg_1", now.Add(-time.Hour), bounce), http.StatusUnauthorized},
		{"malformed", []byte(`{"type":`), signed(t, genericSecret, "msg_2", now, []byte(`{"type":`)), http.StatusBadRequest},
		{"unknown field", []byte(`{"type":"bounced","kind":"x"}`), signed(t, genericSecret, "msg_3", now, []byte(`{"type":"bounced","kind":"x"}`)), http.StatusBadRequest},
		{"trailing bytes", append(append([]byte(nil), bounce...), "garbage"...), signed(t, genericSecret, "msg_6", now, append(append([]byte(nil), bounce...), "garbage"...)), http.StatusBadRequest},
		{"two objects", append(append([]byte(nil), bounce...), bounce...), signed(t, genericSecret, "msg_7", now, append(append([]byte(nil), bounce...), bounce...)), http.StatusBadRequest},
		{"unknown type", mustJSON(t, GenericEvent{Type: "opened", Recipient: "a@example.com"}),
			signed(t, genericSecret, "msg_4", now, mustJSON(t, GenericEvent{Type: "opened", Recipient: "a@example.com"})), http.StatusBadRequest},
		{"oversized", oversized(), signed(t, genericSecret, "msg_5", now, oversized()), http.StatusRequestEntityTooLarge},
		// Without a recipient the event could neither suppress nor be
		// checked against its row's: refused, not stored half-empty.
		{"no recipient", []byte(`{"type":"bounced","bounce_class":"hard","row_id":"` + row + `"}`),
			signed(t, genericSecret, "msg_8", now, []byte(`{"type":"bounced","bounce_class":"hard","row_id":"`+row+`"}`)), http.StatusBadRequest},
	}
	before := f.state()
	for _, tc := range bad {
		if code, body := f.post(ProviderGeneric, tc.body, tc.header, "", ""); code != tc.want {
			t.Errorf("%s: %d %q; want %d", tc.name, code, body, tc.want)
		}
		if got := f.state(); got != before {
			t.Fatalf("%s changed the database: %+v → %+v", tc.name, before, got)
		}
	}

	code, body := f.post(ProviderGeneric, bounce, signed(t, genericSecret, "msg_1", now, bounce), "", "")
	if code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1}) {
		t.Fatalf("signed bounce: %d %q", code, body)
	}
	if evs := f.events(row); len(evs) != 1 || evs[0].ProviderEventID != "msg_1" || evs[0].BounceClass != outbox.BounceHard {
		t.Fatalf("events %+v", evs)
	}
	if s, ok := f.suppression("ada@example.com"); !ok || s.SourceRow != row {
		t.Errorf("suppression %+v, %v", s, ok)
	}
	after := f.state()
	code, body = f.post(ProviderGeneric, bounce, signed(t, genericSecret, "msg_1", now.Add(time.Second), bounce), "", "")
	if code != http.StatusOK || answerOf(t, body) != (answer{Duplicates: 1}) || f.state() != after {
		t.Fatalf("replay: %d %q; want one duplicate and nothing written", code, body)
	}

	byRow := mustJSON(t, GenericEvent{Type: outbox.EventDelivered, RowID: row, Recipient: "ada@example.com"})
	if code, body := f.post(ProviderGeneric, byRow, signed(t, genericSecret, "msg_6", now, byRow), "", ""); code != http.StatusOK ||
		answerOf(t, body) != (answer{Recorded: 1}) {
		t.Fatalf("by row id: %d %q", code, body)
	}
	unknown := mustJSON(t, GenericEvent{Type: outbox.EventDelivered, RowID: "0f0e0d0c-0000-4000-8000-000000000002", Recipient: "x@example.com"})
	code, body = f.post(ProviderGeneric, unknown, signed(t, genericSecret, "msg_7", now, unknown), "", "")
	if code != http.StatusOK || answerOf(t, body) != (answer{Recorded: 1, Orphans: 1}) || f.orphanCount(ProviderGeneric) != 1 {
		t.Fatalf("unknown row: %d %q, orphans counted %v", code, body, f.orphanCount(ProviderGeneric))
	}
}

// TestDatabaseFailureIs500: when the event cannot be recorded (here, the
// table locked past RecordTimeout) the answer is 500, so the provider
// retries; the retry records it once.
func TestDatabaseFailureIs500(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	h, err := New(Config{DB: pool, Settings: Settings{GenericSecret: genericSecret}, RecordTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, pool: pool, srv: srv}
	body := mustJSON(t, GenericEvent{Type: outbox.EventDelivered, Recipient: "ada@example.com"})

	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE email_events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	code, answer := f.post(ProviderGeneric, body, signed(t, genericSecret, "msg_db", time.Now(), body), "", "")
	_ = lock.Rollback(ctx)
	if code != http.StatusInternalServerError || strings.Contains(answer, "lock") {
		t.Fatalf("with the table locked: %d %q; want 500 without the database's words", code, answer)
	}
	code, answer = f.post(ProviderGeneric, body, signed(t, genericSecret, "msg_db", time.Now(), body), "", "")
	if code != http.StatusOK || answerOf(t, answer).Recorded != 1 {
		t.Fatalf("the retry: %d %q; want it recorded", code, answer)
	}
}
