package outbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	netmail "net/mail"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/mimetest"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// sealedEmail is an invoice email carrying every secret field, each
// holding "s3cr3t", and the fields that must stay readable.
func sealedEmail() Email {
	return Email{
		Kind:       KindInvoice,
		CustomerID: "cus_enc",
		InvoiceID:  "inv_enc",
		Payload: Payload{
			To: "ada@example.com", Subject: "Your invoice INV-7", Name: "Ada",
			InvoiceNumber: "INV-7", AmountDue: "€12.00", AttemptNumber: 3, Trigger: "invoice.finalized",
			SetupURL:         "https://pay.example.com/setup/s3cr3t-setup",
			UpdateURL:        "https://pay.example.com/update/s3cr3t-update",
			PasswordResetURL: "https://app.example.com/reset/s3cr3t-reset",
			InviteURL:        "https://app.example.com/invite/s3cr3t-invite",
			PublicToken:      "pt_s3cr3t",
			PDF:              []byte("%PDF-1.7 s3cr3t invoice body"),
		},
	}
}

// enqueueWith writes email with an Enqueuer holding keys and commits.
func enqueueWith(t *testing.T, pool *pgxpool.Pool, keys *KeyRing, email Email) string {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	id, err := (&Enqueuer{Keys: keys}).Enqueue(ctx, tx, email)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

// secretNeedles are the plaintexts of p's secret fields as they would be
// stored: the strings, and the PDF as base64 (and raw).
func secretNeedles(p Payload) []string {
	needles := []string{"s3cr3t"}
	for _, s := range []string{p.SetupURL, p.UpdateURL, p.PasswordResetURL, p.InviteURL, p.PublicToken} {
		if s != "" {
			needles = append(needles, s)
		}
	}
	if len(p.PDF) > 0 {
		needles = append(needles, base64.StdEncoding.EncodeToString(p.PDF), string(p.PDF))
	}
	return needles
}

// mapNeedles are the plaintexts of a plain-SQL payload's secret fields.
func mapNeedles(payload map[string]any) []string {
	needles := []string{"s3cr3t"}
	for _, k := range scrubbedPayloadKeys {
		if v, ok := payload[k].(string); ok {
			needles = append(needles, v)
		}
	}
	return needles
}

// assertNoPlaintext searches the whole stored row — every column, the raw
// JSON of the payload — for any of needles.
func assertNoPlaintext(t *testing.T, db DB, id string, needles []string) {
	t.Helper()
	var row string
	if err := db.QueryRow(testCtx(t), `SELECT to_jsonb(e)::text FROM email_outbox e WHERE id = $1`, id).Scan(&row); err != nil {
		t.Fatal(err)
	}
	for _, n := range needles {
		if strings.Contains(row, n) {
			t.Fatalf("stored row %s contains the plaintext %q:\n%s", id, n, row)
		}
	}
}

// assertSealedUnder checks that each key of the payload is an envelope
// under kid, and nothing else: {enc, kid, n, ct}, plus t = bytes for the
// PDF, which is sealed as its bytes.
func assertSealedUnder(t *testing.T, payload map[string]any, kid string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		env, ok := payload[k].(map[string]any)
		members := 4
		if k == "pdf" {
			members = 5
			ok = ok && env["t"] == "bytes"
		}
		if !ok || env["enc"] != "v1" || env["kid"] != kid || env["n"] == "" || env["ct"] == "" || len(env) != members {
			t.Errorf("payload[%q] = %v, want an envelope {enc v1, kid %s, n, ct} under %s", k, payload[k], kid, kid)
		}
	}
}

// captureRenderer records the payload each row was rendered from, then
// renders it with the default renderer.
type captureRenderer struct {
	mu       sync.Mutex
	payloads map[string]Payload
}

func newCaptureRenderer() *captureRenderer { return &captureRenderer{payloads: map[string]Payload{}} }

func (c *captureRenderer) Render(ctx context.Context, row *Row) (smtp.Message, error) {
	c.mu.Lock()
	c.payloads[row.ID] = row.Payload
	c.mu.Unlock()
	return DefaultRenderer().Render(ctx, row)
}

func (c *captureRenderer) payload(id string) (Payload, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.payloads[id]
	return p, ok
}

// secretsOf is p's secret fields, for comparing what was sent with what
// was enqueued.
func secretsOf(p Payload) [6]string {
	return [6]string{p.SetupURL, p.UpdateURL, p.PasswordResetURL, p.InviteURL, p.PublicToken, string(p.PDF)}
}

// Enqueue with keys stores each secret field as an envelope under the
// active key; no plaintext of any of them is anywhere in the row, raw or
// base64. The other fields stay readable, and the read APIs return what
// they returned before.
func TestEncryption_StoredRowHoldsNoPlaintextSecret(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ring := newTestKeys("k1", "k0").ring(t, "k1", "k0")
	email := sealedEmail()
	id := enqueueWith(t, pool, ring, email)

	assertNoPlaintext(t, pool, id, secretNeedles(email.Payload))
	st := getRow(t, pool, id)
	assertSealedUnder(t, st.Payload, "k1", scrubbedPayloadKeys...)
	for k, want := range map[string]any{"to": "ada@example.com", "subject": "Your invoice INV-7", "name": "Ada",
		"invoice_number": "INV-7", "amount_due": "€12.00", "attempt_number": float64(3), "trigger": "invoice.finalized"} {
		if st.Payload[k] != want {
			t.Errorf("payload[%q] = %v, want %v readable", k, st.Payload[k], want)
		}
	}
	if st.Status != "pending" || st.Attempts != 0 {
		t.Errorf("row %s with %d attempts, want pending, 0", st.Status, st.Attempts)
	}

	recs, err := ListByInvoice(ctx, pool, "inv_enc")
	if err != nil || len(recs) != 1 {
		t.Fatalf("ListByInvoice: %v, %v", recs, err)
	}
	r := recs[0]
	if r.ID != id || r.To != "ada@example.com" || r.InvoiceNumber != "INV-7" || r.AttemptNumber != 3 || r.Trigger != "invoice.finalized" {
		t.Errorf("timeline record %+v, want the readable fields", r)
	}
	if bytes.Contains(r.Payload, []byte(`"enc"`)) {
		t.Errorf("read API returned sealed fields: %s", r.Payload)
	}
}

// A sealed row is opened just before rendering and sent complete; its
// dispatched mark then removes the six fields, sealed as they are.
func TestEncryption_SealedRowSendsCompleteEmailThenScrubbed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ring := newTestKeys("k1").ring(t, "k1")
	email := sealedEmail()
	id := enqueueWith(t, pool, ring, email)

	sender, capture := newFakeSender(nil), newCaptureRenderer()
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Keys, c.Renderer = ring, capture })
	if res, err := d.runBatch(ctx); err != nil || res.Sent != 1 {
		t.Fatalf("runBatch: %+v, %v", res, err)
	}
	got, _ := capture.payload(id)
	if !reflect.DeepEqual(got, email.Payload) {
		t.Errorf("rendered from %+v, want the enqueued payload %+v", got, email.Payload)
	}
	msgs := sender.messages()
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, email.Payload.UpdateURL) ||
		!strings.Contains(msgs[0].Text, email.Payload.SetupURL) || !bytes.Equal(msgs[0].PDF, email.Payload.PDF) {
		t.Fatalf("sent %+v, want the invoice with both links and the PDF", msgs)
	}
	st := getRow(t, pool, id)
	if st.Status != "dispatched" {
		t.Fatalf("row %s, want dispatched", st.Status)
	}
	for _, k := range scrubbedPayloadKeys {
		if _, ok := st.Payload[k]; ok {
			t.Errorf("dispatched row kept %q", k)
		}
	}
	if st.Payload["invoice_number"] != "INV-7" {
		t.Errorf("dispatched row lost its readable fields: %v", st.Payload)
	}
}

// A ciphertext is bound to its row and field: copied into another row, or
// into another field of the same row, it does not open, and that row fails
// at once (a permanent error naming the row and key id) without sending an
// email that carries someone else's link. Left in place it opens.
func TestEncryption_MovedCiphertextDoesNotOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fromRow  string // "victim" or "donor"
		from     string // field copied into the victim's update_url
		wantSent bool
	}{
		{"left in place", "victim", "update_url", true},
		{"copied from another row", "donor", "update_url", false},
		{"copied from another field of the same row", "victim", "setup_url", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ring := newTestKeys("k1").ring(t, "k1")
			donorEmail, victimEmail := sealedEmail(), sealedEmail()
			donorEmail.Payload.UpdateURL = "https://pay.example.com/update/donor-s3cr3t"
			ids := map[string]string{"donor": enqueueWith(t, pool, ring, donorEmail), "victim": enqueueWith(t, pool, ring, victimEmail)}
			victim := ids["victim"]
			if _, err := pool.Exec(ctx, `UPDATE email_outbox
SET payload = jsonb_set(payload, '{update_url}', (SELECT payload->$3::text FROM email_outbox WHERE id = $2))
WHERE id = $1`, victim, ids[tc.fromRow], tc.from); err != nil {
				t.Fatal(err)
			}

			var mu sync.Mutex
			results := map[string]Result{}
			sender := newFakeSender(nil)
			d := newDispatcher(t, pool, sender, func(c *Config) {
				c.Keys = ring
				c.AfterSend = func(_ context.Context, r Result) { mu.Lock(); results[r.RowID] = r; mu.Unlock() }
			})
			if _, err := d.runBatch(ctx); err != nil {
				t.Fatal(err)
			}
			if st := getRow(t, pool, ids["donor"]); st.Status != "dispatched" {
				t.Errorf("donor row %s, want dispatched", st.Status)
			}
			st := getRow(t, pool, victim)
			if tc.wantSent {
				if st.Status != "dispatched" || sender.callsFor(victim) != 1 {
					t.Fatalf("victim row %s (last_error %q), sent %d times; want it sent", st.Status, lastErr(st), sender.callsFor(victim))
				}
				return
			}
			if st.Status != "failed" || st.Attempts != 1 || sender.callsFor(victim) != 0 {
				t.Fatalf("victim row %s after %d attempts, sent %d times; want failed at once, nothing sent",
					st.Status, st.Attempts, sender.callsFor(victim))
			}
			for _, want := range []string{victim, "payload.update_url", `key id "k1"`, "does not authenticate"} {
				if !strings.Contains(lastErr(st), want) {
					t.Errorf("last_error %q does not contain %q", lastErr(st), want)
				}
			}
			if r := results[victim]; r.Outcome != OutcomeFailed || !errors.Is(r.Err, smtp.ErrPermanent) {
				t.Errorf("victim's result %+v, want a permanent failure", r)
			}
		})
	}
}

// A field sealed under a key id the dispatcher's ring does not hold (a
// retired key, or no ring at all) fails its row permanently, naming the
// row and the key id; nothing is sent with a link missing. Putting the key
// back and requeueing sends the email.
func TestEncryption_UnknownKeyIDFailsPermanently(t *testing.T) {
	t.Parallel()
	keys := newTestKeys("k1", "k2")
	for _, tc := range []struct {
		name string
		ring *KeyRing
	}{
		{"key not in the ring", keys.ring(t, "k2")},
		{"no ring", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			email := sealedEmail()
			id := enqueueWith(t, pool, keys.ring(t, "k1"), email)
			before := getRow(t, pool, id)

			var result Result
			sender := newFakeSender(nil)
			d := newDispatcher(t, pool, sender, func(c *Config) {
				c.Keys = tc.ring
				c.AfterSend = func(_ context.Context, r Result) { result = r }
			})
			if res, err := d.runBatch(ctx); err != nil || res.Failed != 1 {
				t.Fatalf("runBatch: %+v, %v; want the row failed", res, err)
			}
			st := getRow(t, pool, id)
			if st.Status != "failed" || st.Attempts != 1 || sender.callsFor(id) != 0 {
				t.Fatalf("row %s after %d attempts, sent %d times; want failed at once, nothing sent", st.Status, st.Attempts, sender.callsFor(id))
			}
			for _, want := range []string{id, `key id "k1"`, "not in the key ring"} {
				if !strings.Contains(lastErr(st), want) {
					t.Errorf("last_error %q does not contain %q", lastErr(st), want)
				}
			}
			if !errors.Is(result.Err, smtp.ErrPermanent) {
				t.Errorf("result error %v, want it to match smtp.ErrPermanent", result.Err)
			}
			if st.RawPayload != before.RawPayload {
				t.Errorf("the failed mark changed the sealed payload")
			}

			// The operator puts k1 back and requeues.
			if err := Requeue(ctx, pool, id, "test"); err != nil {
				t.Fatal(err)
			}
			capture := newCaptureRenderer()
			fixed := newDispatcher(t, pool, sender, func(c *Config) { c.Keys, c.Renderer = keys.ring(t, "k2", "k1"), capture })
			if res, err := fixed.runBatch(ctx); err != nil || res.Sent != 1 {
				t.Fatalf("after restoring the key: %+v, %v", res, err)
			}
			if got, _ := capture.payload(id); secretsOf(got) != secretsOf(email.Payload) {
				t.Errorf("requeued row sent with secrets %q, want %q", secretsOf(got), secretsOf(email.Payload))
			}
		})
	}
}

// A row inserted by plain SQL with plaintext secrets is sent as before. If
// its attempt does not send it, the mark that keeps it pending or fails it
// seals those fields in the same UPDATE, so the row never waits in
// plaintext; the next attempt (or a requeue) still sends every field.
// Nothing logged along the way carries a secret.
func TestEncryption_PlainSQLRowSealedByTheMarkThatKeepsItWaiting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		payload    func() map[string]any
		sendErr    error
		wantStatus string
	}{
		{"sent at the first attempt", secretPayload, nil, "dispatched"},
		{"permanent failure", secretPayload, &smtp.ReplyError{Code: 550, Text: "no such user"}, "failed"},
		{"transient failure", secretPayload, &smtp.ReplyError{Code: 451, Text: "try later"}, "pending"},
		{"undecodable payload", func() map[string]any { p := secretPayload(); delete(p, "to"); return p }, nil, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ring := newTestKeys("k1").ring(t, "k1")
			payload := tc.payload()
			id := insertRow(t, pool, "raw", payload)
			before := getRow(t, pool, id)

			logs := newLogRecorder()
			capture := newCaptureRenderer()
			sender := newFakeSender(func(context.Context, smtp.Message) error { return tc.sendErr })
			d := newDispatcher(t, pool, sender, func(c *Config) { c.Keys, c.Renderer, c.Logger = ring, capture, slog.New(logs) })
			if _, err := d.runBatch(ctx); err != nil {
				t.Fatal(err)
			}
			st := getRow(t, pool, id)
			if st.Status != tc.wantStatus {
				t.Fatalf("row %s (last_error %q), want %s", st.Status, lastErr(st), tc.wantStatus)
			}
			for _, r := range *logs.records {
				for k, v := range r.Attrs {
					if strings.Contains(v, "s3cr3t") {
						t.Errorf("log line %q attribute %s carries a secret: %s", r.Message, k, v)
					}
				}
			}
			if tc.wantStatus == "dispatched" {
				if got, _ := capture.payload(id); got.SetupURL != payload["setup_url"] || got.PublicToken != payload["public_token"] {
					t.Errorf("sent from %+v, want the plaintext fields", got)
				}
				for _, k := range scrubbedPayloadKeys {
					if _, ok := st.Payload[k]; ok {
						t.Errorf("dispatched row kept %q", k)
					}
				}
				return
			}

			assertNoPlaintext(t, pool, id, mapNeedles(payload))
			assertSealedUnder(t, st.Payload, "k1", scrubbedPayloadKeys...)
			for k, v := range before.Payload {
				if !strings.Contains(strings.Join(scrubbedPayloadKeys, ","), k) && !reflect.DeepEqual(st.Payload[k], v) {
					t.Errorf("payload[%q] = %v after the mark, want %v untouched", k, st.Payload[k], v)
				}
			}
			if tc.name == "undecodable payload" {
				return
			}

			// The row is retried (or requeued) and sent with every field.
			if st.Status == "failed" {
				if err := Requeue(ctx, pool, id, "test"); err != nil {
					t.Fatal(err)
				}
			} else if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			ok := newFakeSender(nil)
			if res, err := newDispatcher(t, pool, ok, func(c *Config) { c.Keys, c.Renderer = ring, capture }).runBatch(ctx); err != nil || res.Sent != 1 {
				t.Fatalf("second attempt: %+v, %v", res, err)
			}
			got, _ := capture.payload(id)
			want := [6]string{payload["setup_url"].(string), payload["update_url"].(string), payload["password_reset_url"].(string),
				payload["invite_url"].(string), payload["public_token"].(string), "%PDF-1.7 invoice"}
			if secretsOf(got) != want {
				t.Errorf("second attempt rendered secrets %q, want %q", secretsOf(got), want)
			}
			if msgs := ok.messages(); len(msgs) != 1 || string(msgs[0].PDF) != "%PDF-1.7 invoice" {
				t.Errorf("second attempt sent %+v, want the message with its PDF", msgs)
			}
		})
	}
}

// End to end through a real SMTP exchange: a sealed invoice fails
// permanently, stays sealed while failed, and an operator's requeue sends
// the complete email — both links in the text, the PDF attached.
func TestEncryption_RequeueAfterFailureSendsFullEmail(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ring := newTestKeys("k1").ring(t, "k1")
	email := sealedEmail()
	id := enqueueWith(t, pool, ring, email)

	reject := newFakeSender(func(context.Context, smtp.Message) error {
		return &smtp.ReplyError{Code: 550, Text: "mailbox unavailable"}
	})
	if res, err := newDispatcher(t, pool, reject, func(c *Config) { c.Keys = ring }).runBatch(ctx); err != nil || res.Failed != 1 {
		t.Fatalf("first attempt: %+v, %v; want failed", res, err)
	}
	assertNoPlaintext(t, pool, id, secretNeedles(email.Payload))
	if err := Requeue(ctx, pool, id, "test"); err != nil {
		t.Fatal(err)
	}

	sink, mailer := newSinkMailer(t)
	if res, err := newDispatcher(t, pool, mailer, func(c *Config) { c.Keys = ring }).runBatch(ctx); err != nil || res.Sent != 1 {
		t.Fatalf("after the requeue: %+v, %v; want sent", res, err)
	}
	if err := sink.WaitFor(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := sink.Messages()[0]
	if got.RowID != id {
		t.Fatalf("sink received row %q, want %s", got.RowID, id)
	}
	parsed, err := netmail.ReadMessage(bytes.NewReader(got.Data))
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string][]byte{}
	mimetest.Collect(t, parsed.Header.Get("Content-Type"), parsed.Body, parts)
	for _, link := range []string{email.Payload.UpdateURL, email.Payload.SetupURL} {
		if !bytes.Contains(parts["text/plain"], []byte(link)) {
			t.Errorf("text part %q lacks the link %s", parts["text/plain"], link)
		}
	}
	if !bytes.Equal(parts["application/pdf"], email.Payload.PDF) {
		t.Errorf("attached PDF %q, want %q", parts["application/pdf"], email.Payload.PDF)
	}
	if st := getRow(t, pool, id); st.Status != "dispatched" || st.Payload["update_url"] != nil || st.Payload["pdf"] != nil {
		t.Errorf("row after the send: %s, payload %v; want dispatched and scrubbed", st.Status, st.Payload)
	}
}
