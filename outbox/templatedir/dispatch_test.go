package templatedir_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/mailpittest"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/outbox/templatedir"
	"github.com/postbox/postbox/smtp"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// The target: a custom receipt kind from a template directory, enqueued by
// plain SQL, arrives at Mailpit rendered, with its subject and both parts.
func TestDispatch_ReceiptFromPlainSQLArrivesAtMailpit(t *testing.T) {
	t.Parallel()
	bin := mailpittest.Binary(t)
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	set, err := templatedir.Load("testdata/receipts")
	if err != nil {
		t.Fatal(err)
	}
	mp := mailpittest.Start(t, bin)
	mailer, err := smtp.New(smtp.Config{Host: "127.0.0.1", Port: mp.SMTPPort, Mode: smtp.ModeNone, From: "Shop <shop@example.com>"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mailer.Close() })
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: mailer, Renderer: set})
	if err != nil {
		t.Fatal(err)
	}

	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload) VALUES ('receipt', 'cus_1',
		'{"to": "grace@example.com", "name": "Grace", "order_id": "ord_7", "total": "€3.00", "items": ["Oolong"]}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var status string
	var lastErr *string
	if err := pool.QueryRow(ctx, `SELECT status, last_error FROM email_outbox WHERE id = $1`, id).Scan(&status, &lastErr); err != nil || status != "dispatched" {
		t.Fatalf("row %s: status %q, last_error %v (%v); want dispatched", id, status, deref(lastErr), err)
	}

	var list struct {
		Messages []struct{ ID, Subject string }
	}
	mp.WaitForMessages(t, 1, &list)
	var full struct{ Subject, Text, HTML string }
	mp.GetJSON(t, "/api/v1/message/"+list.Messages[0].ID, &full)
	if full.Subject != "Receipt for order ord_7" {
		t.Errorf("subject %q; want the one subject.tmpl renders", full.Subject)
	}
	if !strings.Contains(full.Text, "Hello Grace,") || !strings.Contains(full.Text, "- Oolong") || strings.Contains(full.Text, "download") {
		t.Errorf("text part %q; want the receipt rendered from text.tmpl, no download line", full.Text)
	}
	if !strings.Contains(full.HTML, "<h1>Receipt for order ord_7</h1>") || !strings.Contains(full.HTML, "<li>Oolong</li>") ||
		!strings.Contains(full.HTML, "Example Shop") {
		t.Errorf("HTML part %q; want html.tmpl inside the shared layout with its footer", full.HTML)
	}
}

// The target: a kind's declared secret keys (receipt/kind.json:
// download_url and license_key, two, so that a step handling only the
// first is caught) are sealed while the row is pending — by Enqueue with
// keys, and by the mark that keeps a plain-SQL row waiting — reach the
// recipient opened, and are scrubbed from both rows once they are sent,
// the scrub naming each.
func TestDispatch_DeclaredSecretKeySealedWhilePendingScrubbedOnceSent(t *testing.T) {
	t.Parallel()
	bin := mailpittest.Binary(t)
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	set, err := templatedir.Load("testdata/receipts")
	if err != nil {
		t.Fatal(err)
	}
	declared := []string{"download_url", "license_key"}
	if got := set.SecretPayloadKeys(); !slices.Equal(got, declared) {
		t.Fatalf("SecretPayloadKeys = %q; want the %q receipt/kind.json declares", got, declared)
	}
	ring, err := outbox.ParseKeyRing("k1:" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	if err != nil {
		t.Fatal(err)
	}
	const sealedLink, plainLink = "https://shop.example.com/d/s3cr3t-go", "https://shop.example.com/d/s3cr3t-sql"

	// From Go: sealed by Enqueue.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enq := outbox.Enqueuer{Keys: ring, SecretKeys: set.SecretPayloadKeys()}
	goID, err := enq.Enqueue(ctx, tx, outbox.Email{Kind: "receipt", CustomerID: "cus_1", Payload: outbox.Payload{
		To: "grace@example.com", Name: "Grace",
		Data: map[string]any{"order_id": "ord_8", "total": "€3.00", "items": []string{"Oolong"}, "download_url": sealedLink,
			"license_key": "LK-s3cr3t-go"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// From plain SQL, in plaintext: sealed by its first attempt's mark,
	// which a relay refusing with 451 makes a retry.
	var sqlID string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload, next_attempt_at) VALUES ('receipt', 'cus_2',
		jsonb_build_object('to', 'lin@example.com', 'name', 'Lin', 'order_id', 'ord_9', 'total', '€4.00', 'items', '[]'::jsonb, 'download_url', $1::text,
			'license_key', 'LK-s3cr3t-sql'),
		now() + interval '1 hour') RETURNING id`, plainLink).Scan(&sqlID); err != nil {
		t.Fatal(err)
	}
	refuse := outbox.SenderFunc(func(context.Context, smtp.Message) error {
		return &smtp.ReplyError{Code: 451, Text: "try later"}
	})
	first, err := outbox.NewDispatcher(pool, outbox.Config{Sender: refuse, Renderer: set, Keys: ring})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1`, sqlID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() + interval '1 hour' WHERE id = $1`, goID); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Drain(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	var inTable []string
	if err := pool.QueryRow(ctx, `SELECT ARRAY(SELECT key FROM email_secret_keys ORDER BY key)`).Scan(&inTable); err != nil || !slices.Equal(inTable, declared) {
		t.Fatalf("email_secret_keys = %q (%v); want the dispatcher to declare %q before its first claim", inTable, err, declared)
	}
	for _, id := range []string{goID, sqlID} {
		var row string
		var kids []string
		var attempts int
		if err := pool.QueryRow(ctx, `SELECT to_jsonb(e)::text, ARRAY(SELECT coalesce(payload->k->>'kid', '') FROM unnest($2::text[]) k), attempts
			FROM email_outbox e WHERE id = $1`, id, declared).Scan(&row, &kids, &attempts); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(row, "s3cr3t") || !slices.Equal(kids, []string{"k1", "k1"}) {
			t.Fatalf("pending row %s (%d attempts): %q sealed under %q; want each an envelope under k1 and no plaintext secret:\n%s",
				id, attempts, declared, kids, row)
		}
		// Nor does any reader show it (worker show, the console).
		rec, err := outbox.Get(ctx, pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(rec.Payload); strings.Contains(string(b), "download_url") || strings.Contains(string(b), "license_key") {
			t.Errorf("Get(%s).Payload = %s; want download_url and license_key left out", id, b)
		}
	}

	mp := mailpittest.Start(t, bin)
	mailer, err := smtp.New(smtp.Config{Host: "127.0.0.1", Port: mp.SMTPPort, Mode: smtp.ModeNone, From: "Shop <shop@example.com>"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mailer.Close() })
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: mailer, Renderer: set, Keys: ring})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{goID, sqlID} {
		var status, payload string
		var scrubbed []string
		if err := pool.QueryRow(ctx, `SELECT status, payload::text, scrubbed_keys FROM email_outbox WHERE id = $1`, id).
			Scan(&status, &payload, &scrubbed); err != nil {
			t.Fatal(err)
		}
		slices.Sort(scrubbed)
		if status != "dispatched" || strings.Contains(payload, "download_url") || strings.Contains(payload, "license_key") ||
			!slices.Equal(scrubbed, declared) {
			t.Errorf("sent row %s: %s, payload %s, scrubbed_keys %q; want dispatched, %q scrubbed and named", id, status, payload, scrubbed, declared)
		}
	}
	var list struct {
		Messages []struct{ ID, Subject string }
	}
	mp.WaitForMessages(t, 2, &list)
	var texts []string
	for _, m := range list.Messages {
		var full struct{ Text string }
		mp.GetJSON(t, "/api/v1/message/"+m.ID, &full)
		texts = append(texts, full.Text)
	}
	all := strings.Join(texts, "\n----\n")
	if !strings.Contains(all, "Your download: "+sealedLink) || !strings.Contains(all, "Your download: "+plainLink) {
		t.Errorf("received texts %q; want each with its opened download link", all)
	}
}

// A row of a kind neither built in nor in the directory fails at once,
// never reaching the relay, with last_error naming the kind; a built-in
// kind the directory does not replace still goes out.
func TestDispatch_UnknownKindFailsPermanentlyNamingIt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	set, err := templatedir.Load("testdata/receipts")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []string
	sender := outbox.SenderFunc(func(_ context.Context, msg smtp.Message) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, msg.Subject)
		return nil
	})
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: sender, Renderer: set})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload) VALUES
		('newsletter', 'cus_1', '{"to": "ada@example.com", "subject": "News", "text": "t"}'),
		('raw', 'cus_2', '{"to": "ada@example.com", "subject": "Raw", "text": "t"}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var status, lastErr string
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT status, coalesce(last_error, ''), attempts FROM email_outbox WHERE kind = 'newsletter'`).
		Scan(&status, &lastErr, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || attempts != 1 || !strings.Contains(lastErr, `kind "newsletter"`) || strings.Count(lastErr, "render") != 1 {
		t.Fatalf("newsletter row: %s after %d attempts, last_error %q; want failed at once naming the kind, under one render: prefix", status, attempts, lastErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 || sent[0] != "Raw" {
		t.Fatalf("sent %q; want only the raw row", sent)
	}
}

// Render itself: the unknown kind's error is permanent; a key still sealed
// (a kind whose secret key this worker did not open) is refused, not
// rendered as its envelope.
func TestRender_PermanentErrors(t *testing.T) {
	t.Parallel()
	set, err := templatedir.Load("testdata/receipts")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		row  outbox.Row
		want string
	}{
		{"unknown kind", outbox.Row{ID: "r1", Kind: "newsletter", Payload: outbox.Payload{To: "ada@example.com"}},
			`kind "newsletter" is neither built in nor in the template directory`},
		{"sealed key not opened", outbox.Row{ID: "r2", Kind: "receipt", Payload: outbox.Payload{To: "ada@example.com", Name: "Ada"},
			RawPayload: json.RawMessage(`{"to": "ada@example.com", "name": "Ada", "order_id": "1", "total": "1", "items": [],
				"download_url": {"enc": "v1", "kid": "k1", "n": "AA==", "ct": "AA=="}}`)},
			"payload.download_url is sealed and was not opened"},
		{"missing key in a row", outbox.Row{ID: "r3", Kind: "receipt", Payload: outbox.Payload{To: "ada@example.com"},
			RawPayload: json.RawMessage(`{"to": "ada@example.com"}`)},
			`receipt/subject.tmpl:1:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := set.Render(context.Background(), &tc.row)
			if !errors.Is(err, smtp.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render = %v; want a permanent error containing %q", err, tc.want)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
