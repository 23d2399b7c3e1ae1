package mailevents

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/outbox"
)

// TestCorrelation_Precedence puts the identifiers an event can carry in
// conflict — each naming a different row — and pins which one wins, for
// the generic format, SES and a Postmark bounce dump, end to end through
// the endpoints and RecordEvent. The rule as shipped:
//
//  1. the X-Postbox-Row value (generic row_id, SES mail.headers, Postmark
//     metadata, then the headers quoted in a dump) — the first one that
//     holds a row id;
//  2. else the Message-ID of postbox's shape (generic message_id, SES
//     commonHeaders.messageId, in a dump the last one: a report's own
//     Message-ID comes before the original it quotes);
//  3. else the row of an earlier event from the same provider about the
//     same provider message id.
//
// A header that holds a row id wins even when no such row exists: the
// event is then correlated by rule 3 or kept as an orphan, never by a
// Message-ID naming another row. Postbox writes the same id into both, so
// a conflict means one was rewritten or forged, and an orphan (which
// suppresses nobody by default) is the safe reading.
func TestCorrelation_Precedence(t *testing.T) {
	t.Parallel()
	sns := newSNSFake(t)
	f := newFixture(t, Settings{PostmarkUsername: "pm", PostmarkPassword: "pw", SNSTopicARNs: []string{testTopic},
		GenericSecret: genericSecret}, sns.options())
	const to = "ada@example.com"
	// H is named by the header, M by the Message-ID, P by the provider's
	// message id through an earlier event; U has a row id's shape and no row.
	rows := map[string]string{"H": f.sentRow(to), "M": f.sentRow(to), "P": f.sentRow(to), "orphan": ""}
	H, M, P := rows["H"], rows["M"], rows["P"]
	const U = "0f0e0d0c-0000-4000-8000-00000000beef"
	const seeded = "provider-msg-of-P"
	for _, provider := range []string{ProviderGeneric, ProviderSES, ProviderPostmark} {
		if _, err := outbox.RecordEvent(context.Background(), f.pool, outbox.Event{RowID: P, Type: outbox.EventDelivered,
			Provider: provider, ProviderEventID: "seed", ProviderMessageID: seeded, Recipient: to}, outbox.SuppressionPolicy{}); err != nil {
			t.Fatal(err)
		}
	}
	msgID := func(row string) string { return "<" + row + "@example.com>" }

	// Each builder posts one event and returns its provider event id.
	generic := func(g GenericEvent) func(id string) (string, []byte, http.Header) {
		return func(id string) (string, []byte, http.Header) {
			g.Type, g.Recipient = outbox.EventDeferred, to
			body := mustJSON(t, g)
			return id, body, signed(t, genericSecret, id, time.Now(), body)
		}
	}
	type header struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	ses := func(headers []header, commonMessageID, sesMessageID string) func(id string) (string, []byte, http.Header) {
		return func(id string) (string, []byte, http.Header) {
			n := map[string]any{
				"eventType": "DeliveryDelay",
				"deliveryDelay": map[string]any{"delayType": "TransientCommunicationFailure",
					"delayedRecipients": []map[string]string{{"emailAddress": to, "status": "4.4.7"}}},
				"mail": map[string]any{"messageId": sesMessageID, "headers": headers,
					"commonHeaders": map[string]any{"messageId": commonMessageID}},
			}
			return "delay:" + id + ":" + to, sns.sign(t, notification(id, string(mustJSON(t, n))), "2"), nil
		}
	}
	bounceID := 1000
	postmark := func(metadata map[string]string, content, messageID string) func(id string) (string, []byte, http.Header) {
		return func(id string) (string, []byte, http.Header) {
			if messageID == "" {
				// One of its own: a shared one would tie this case to the
				// row an earlier case's event named (rule 3).
				messageID = "pm-" + id
			}
			bounceID++
			rec := map[string]any{"RecordType": "Bounce", "ID": bounceID, "Type": "Transient", "Email": to,
				"MessageID": messageID, "Content": content, "Metadata": metadata}
			return "bounce:" + strconv.Itoa(bounceID), mustJSON(t, rec), nil
		}
	}

	for i, tc := range []struct {
		name, provider string
		event          func(id string) (eventID string, body []byte, h http.Header)
		want           string // key of rows
	}{
		// The generic format.
		{"generic: row_id beats message_id and the provider's id", ProviderGeneric,
			generic(GenericEvent{RowID: H, MessageID: msgID(M), ProviderMessageID: seeded}), "H"},
		{"generic: message_id beats the provider's id", ProviderGeneric,
			generic(GenericEvent{MessageID: msgID(M), ProviderMessageID: seeded}), "M"},
		{"generic: the provider's id when nothing names a row", ProviderGeneric,
			generic(GenericEvent{MessageID: "<not-ours@relay.example>", ProviderMessageID: seeded}), "P"},
		{"generic: a row_id that is no row id is passed over", ProviderGeneric,
			generic(GenericEvent{RowID: "42", MessageID: msgID(M)}), "M"},
		{"generic: a row_id naming no row still beats message_id: the provider's id decides", ProviderGeneric,
			generic(GenericEvent{RowID: U, MessageID: msgID(M), ProviderMessageID: seeded}), "P"},
		{"generic: a row_id naming no row, nothing else: an orphan, not message_id's row", ProviderGeneric,
			generic(GenericEvent{RowID: U, MessageID: msgID(M)}), "orphan"},

		// SES: mail.headers, commonHeaders.messageId, mail.messageId.
		{"ses: X-Postbox-Row beats the Message-ID and SES's id", ProviderSES,
			ses([]header{{"Message-ID", msgID(M)}, {"X-Postbox-Row", H}}, msgID(M), seeded), "H"},
		{"ses: the Message-ID beats SES's id", ProviderSES,
			ses([]header{{"Message-ID", msgID(M)}}, msgID(M), seeded), "M"},
		{"ses: SES's id when SES rewrote the Message-ID", ProviderSES,
			ses([]header{{"Message-ID", "<0102017f-rewritten@email.amazonses.com>"}}, "<0102017f-rewritten@email.amazonses.com>", seeded), "P"},
		{"ses: commonHeaders.messageId is the Message-ID read, not mail.headers'", ProviderSES,
			ses([]header{{"Message-ID", msgID(H)}}, msgID(M), "ses-unmatched-1"), "M"},
		{"ses: the first of two X-Postbox-Row headers", ProviderSES,
			ses([]header{{"X-Postbox-Row", H}, {"x-postbox-row", M}}, msgID(M), "ses-unmatched-2"), "H"},
		{"ses: a later X-Postbox-Row holding no row id does not erase the first", ProviderSES,
			ses([]header{{"X-Postbox-Row", H}, {"X-Postbox-Row", "garbage"}}, msgID(M), "ses-unmatched-3"), "H"},
		{"ses: an X-Postbox-Row naming no row: an orphan, not the Message-ID's row", ProviderSES,
			ses([]header{{"X-Postbox-Row", U}}, msgID(M), "ses-unmatched-4"), "orphan"},

		// A dump: the original's headers quoted in a Postmark bounce's Content.
		{"dump: the last postbox Message-ID, not the report's own before it", ProviderPostmark,
			postmark(nil, "Message-ID: "+msgID(P)+"\n\n--b\nMessage-ID: "+msgID(M)+"\n", ""), "M"},
		{"dump: X-Postbox-Row beats every Message-ID, wherever it is", ProviderPostmark,
			postmark(nil, "Message-ID: <report@mx.example.net>\n\n--b\nX-Postbox-Row: "+H+"\nMessage-ID: "+msgID(M)+"\n", ""), "H"},
		{"dump: the first X-Postbox-Row of two", ProviderPostmark,
			postmark(nil, "X-Postbox-Row: "+H+"\n--b\nX-Postbox-Row: "+M+"\n", ""), "H"},
		{"dump: an X-Postbox-Row holding no row id is passed over", ProviderPostmark,
			postmark(nil, "X-Postbox-Row: garbage\n--b\nX-Postbox-Row: "+H+"\nMessage-ID: "+msgID(M)+"\n", ""), "H"},
		{"dump: metadata beats the dump", ProviderPostmark,
			postmark(map[string]string{"postbox_row": H}, "X-Postbox-Row: "+M+"\n", ""), "H"},
		{"dump: Postmark's MessageID when the dump names no row", ProviderPostmark,
			postmark(nil, "Subject: Invoice\n\nno headers quoted\n", seeded), "P"},
		{"dump: a line past 64 KiB before the quoted headers does not end the search", ProviderPostmark,
			postmark(nil, "X-Report: "+strings.Repeat("z", 200<<10)+"\n--b\nMessage-ID: "+msgID(M)+"\n", ""), "M"},
		{"dump: an X-Postbox-Row naming no row: an orphan, not the Message-ID's row", ProviderPostmark,
			postmark(nil, "X-Postbox-Row: "+U+"\nMessage-ID: "+msgID(M)+"\n", ""), "orphan"},
	} {
		eventID, body, h := tc.event("prec-" + strconv.Itoa(i))
		code, answer := f.post(tc.provider, body, h, "pm", "pw")
		if code != http.StatusOK {
			t.Errorf("%s: %d %q", tc.name, code, answer)
			continue
		}
		if got, want := f.rowOf(tc.provider, eventID), rows[tc.want]; got != want {
			name := map[string]string{H: "H", M: "M", P: "P", "": "orphan"}[got]
			t.Errorf("%s: stored against %s (%q); want %s", tc.name, name, got, tc.want)
		}
	}
}
