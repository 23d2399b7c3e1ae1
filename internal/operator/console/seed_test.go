package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// fixture is a database with rows in every state, and the console on it.
type fixture struct {
	pool    *pgxpool.Pool
	console *Console
	server  *httptest.Server // the console, at /console/
	logs    *logbuf.Buffer   // the console's log lines

	// Email rows.
	failedID, sentID, retryingID, skippedID, freshID, suppressedID string
	// Webhook rows.
	goodEP, badEP, offEP      webhook.Endpoint
	acmeEP                    webhook.Endpoint // of tenant acme; the others have none
	eventID                   string
	goodDelivery, badDelivery string
	failedOutboxID            string
	// jobID is a shift job whose recorded output lists sentID as sent.
	jobID int64

	// secrets are every secret value written anywhere: none may reach a page.
	secrets []string
}

// secretText is recognisable: a page holding it fails the crawl.
func secretText(t *testing.T, what string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "SECRET-" + what + "-" + base64.RawURLEncoding.EncodeToString(b)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{pool: pgtest.NewPool(t), logs: &logbuf.Buffer{}}
	db := f.pool

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ring, err := outbox.ParseKeyRing("k1:" + base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	insert := func(sql string, args ...any) string {
		t.Helper()
		var id string
		if err := db.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return id
	}

	// INV-1042: a failed invoice email whose secrets are sealed, and an
	// earlier one that was sent (its secrets scrubbed).
	updateURL, pdf := "https://billing.example.com/update/"+secretText(t, "UPDATE"), "%PDF-1.4 "+secretText(t, "PDF")
	f.secrets = append(f.secrets, updateURL, pdf, base64.StdEncoding.EncodeToString([]byte(pdf)))
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enq := outbox.Enqueuer{Keys: ring}
	f.failedID, err = enq.Enqueue(ctx, tx, outbox.Email{Kind: outbox.KindInvoice, CustomerID: "cus_42", InvoiceID: "INV-1042",
		Payload: outbox.Payload{To: "Ada Lovelace <ada@example.com>", Subject: "Invoice 1042", InvoiceNumber: "1042",
			UpdateURL: updateURL, PDF: []byte(pdf), AttemptNumber: 2, Trigger: "invoice.finalized"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE email_outbox SET status = 'failed', attempts = 5, last_error = '550 5.1.1 <ada@example.com>: mailbox unavailable',
		created_at = now() - interval '1 minute' WHERE id = $1`, f.failedID)
	f.sentID = insert(`INSERT INTO email_outbox (kind, customer_id, invoice_id, payload, status, attempts, dispatched_at, created_at)
		VALUES ('invoice', 'cus_42', 'INV-1042', '{"to":"ada@example.com","subject":"Invoice 1042","invoice_number":"1042","attempt_number":1}',
		'dispatched', 1, now() - interval '2 days', now() - interval '2 days') RETURNING id`)

	// cus_42's password reset, retrying, its link in plaintext (plain SQL).
	resetURL := "https://app.example.com/reset/" + secretText(t, "RESET")
	f.secrets = append(f.secrets, resetURL)
	f.retryingID = insert(`INSERT INTO email_outbox (kind, customer_id, payload, attempts, last_error, next_attempt_at)
		VALUES ('password_reset', 'cus_42', jsonb_build_object('to', 'ada@example.com', 'subject', 'Reset your password',
		'password_reset_url', $1::text), 2, 'dial tcp 10.0.0.1:587: connect: connection refused', now() + interval '5 minutes') RETURNING id`, resetURL)
	f.skippedID = insert(`INSERT INTO email_outbox (kind, customer_id, payload, status, attempts, last_error)
		VALUES ('member_invite', 'cus_7', '{"to":"bob@example.com","subject":"Join us"}', 'skipped', 1, 'renderer: organisation deleted') RETURNING id`)
	f.freshID = insert(`INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
		VALUES ('cus_7', '{"to":"bob@example.com","subject":"Welcome","text":"Hi"}', now() + interval '1 hour') RETURNING id`)
	exec(`INSERT INTO email_suppressions (email, reason) VALUES ('bounced@example.com', 'hard bounce: 550 no such user')`)
	f.suppressedID = insert(`INSERT INTO email_outbox (customer_id, payload, status, attempts, last_error)
		VALUES ('cus_9', '{"to":"bounced@example.com","subject":"Receipt","text":"x"}', 'failed', 1, 'recipient is suppressed: hard bounce') RETURNING id`)

	// Webhooks: a receiver that takes everything, one that fails.
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/fail" {
			http.Error(w, "internal error at the receiver", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	newEP := func(path string) webhook.Endpoint {
		t.Helper()
		secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(secretText(t, "WHSEC")+"-padding-to-32-bytes"))
		f.secrets = append(f.secrets, secret, secret[len("whsec_"):])
		ep, err := webhook.CreateEndpoint(ctx, db, webhook.Settings{}, webhook.EndpointParams{URL: rc.URL + path, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}
	// The disabled endpoint's URL carries a token, as some receivers'
	// do: no page may show it.
	token := secretText(t, "TOKEN")
	f.secrets = append(f.secrets, token)
	f.goodEP, f.badEP, f.offEP = newEP("/hooks"), newEP("/fail"), newEP("/off?token="+token)
	acme, err := webhook.ForTenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	if f.acmeEP, err = acme.CreateEndpoint(ctx, db, webhook.Settings{}, webhook.EndpointParams{URL: rc.URL + "/acme"}); err != nil {
		t.Fatal(err)
	}
	if err := webhook.DisableEndpoint(ctx, db, f.offEP.ID, "answered 410 Gone"); err != nil {
		t.Fatal(err)
	}
	f.eventID = insert(`INSERT INTO webhook_events (event_type, payload, created_at) VALUES ('invoice.paid', '{"invoice":"INV-1042"}',
		now() - interval '30 minutes') RETURNING id`)
	f.goodDelivery = insert(`INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, delivered_at)
		VALUES ($1, $2, 'succeeded', 1, now() - interval '30 minutes') RETURNING id`, f.eventID, f.goodEP.ID)
	exec(`INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, response_excerpt, created_at)
		VALUES ($1, 1, 204, 35, '', now() - interval '30 minutes')`, f.goodDelivery)
	f.badDelivery = insert(`INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, last_error)
		VALUES ($1, $2, 'failed', 3, 'HTTP 500 after 3 attempts') RETURNING id`, f.eventID, f.badEP.ID)
	exec(`INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, error, response_excerpt, created_at) VALUES
		($1, 1, 500, 120, 'HTTP 500', 'internal error at the receiver', now() - interval '29 minutes'),
		($1, 2, 502, 80, 'HTTP 502', 'bad gateway', now() - interval '20 minutes'),
		($1, 3, NULL, 10000, 'context deadline exceeded (Client.Timeout exceeded while awaiting headers)', NULL, now() - interval '10 minutes')`, f.badDelivery)
	f.failedOutboxID = insert(`INSERT INTO webhook_outbox (event_type, payload, status, attempts, last_error)
		VALUES ('customer.updated', '{"customer":"cus_42"}', 'failed', 8, 'fan-out: connection reset') RETURNING id`)

	if err := db.QueryRow(ctx, `INSERT INTO river_job (kind, args, metadata, state, max_attempts, queue, finalized_at)
		VALUES ('postbox_shift', '{"lane":"email_outbox","replica":"host_1"}',
		jsonb_build_object('output', jsonb_build_object('sent', 1, 'sent_ids', jsonb_build_array($1::text))),
		'completed', 1, 'postbox_r_host_1', now()) RETURNING id`, f.sentID).Scan(&f.jobID); err != nil {
		t.Fatal(err)
	}

	disp, err := webhook.NewDispatcher(db, webhook.Config{Settings: webhook.Settings{
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(disp.Close)
	f.console, err = New(Config{DB: db, Replayer: disp, RiverUIPrefix: "/riverui",
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(f.logs, testLogWriter()), nil))})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", f.console)
	f.server = httptest.NewServer(mux)
	t.Cleanup(f.server.Close)
	return f
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(testLogWriter(), nil)) }

// testLogWriter discards unless POSTBOX_TEST_LOG is set.
func testLogWriter() io.Writer {
	if os.Getenv("POSTBOX_TEST_LOG") == "" {
		return io.Discard
	}
	return os.Stderr
}

func (f *fixture) status(t *testing.T, table, id string) string {
	t.Helper()
	var s string
	if err := f.pool.QueryRow(context.Background(), `SELECT status FROM `+table+` WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
