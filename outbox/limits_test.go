package outbox

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestPayloadLimit_PlainSQLMeetsEnqueue locks the enqueue limits for email: a
// 20 MB payload written by plain SQL used to be claimed and sent, stalling
// its batch. Now the CHECK constraint email_outbox_payload_size refuses it
// at INSERT (SQLSTATE 23514), and Enqueue refuses the same email naming
// its limit. The constraint's figure is MaxStoredPayloadBytes.
func TestPayloadLimit_PlainSQLMeetsEnqueue(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)

	big := strings.Repeat("x", 20<<20)
	_, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
VALUES ('raw', 'cus_big', jsonb_build_object('to', 'ada@example.com', 'subject', 'Big', 'text', $1::text))`, big)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "email_outbox_payload_size" {
		t.Fatalf("plain-SQL INSERT of a 20 MB payload = %v; want SQLSTATE 23514 from email_outbox_payload_size", err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // test cleanup
	_, err = Enqueue(ctx, tx, Email{CustomerID: "cus_big", Payload: Payload{To: "ada@example.com", Subject: "Big", Text: big}})
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "payload" || !strings.Contains(err.Error(), fmt.Sprint(DefaultMaxPayloadBytes)) {
		t.Fatalf("Enqueue of the same email = %v; want a payload ValidationError naming %d", err, DefaultMaxPayloadBytes)
	}

	var def string
	if err := pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'email_outbox_payload_size'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, fmt.Sprintf("<= %d", MaxStoredPayloadBytes)) {
		t.Fatalf("email_outbox_payload_size is %s; want the limit MaxStoredPayloadBytes = %d", def, MaxStoredPayloadBytes)
	}

	// An email at Enqueue's limit, sealed at enqueue, still fits the
	// constraint: the headroom covers the envelopes.
	pdf := append([]byte("%PDF-1.7 "), []byte(strings.Repeat("p", DefaultMaxPayloadBytes*3/4-600))...)
	e := Email{Kind: KindInvoice, CustomerID: "cus_big", Payload: Payload{To: "ada@example.com", Subject: "Invoice", InvoiceNumber: "INV-1",
		PDF: pdf, SetupURL: "https://pay.example.com/s", UpdateURL: "https://pay.example.com/u", PublicToken: "pt"}}
	if _, err := encodePayload(nil, nil, newRowID(), e.Payload, DefaultMaxPayloadBytes); err != nil {
		t.Fatalf("the test email must fit Enqueue's limit: %v", err)
	}
	ring := newTestKeys("k1").ring(t, "k1")
	enqueueWith(t, pool, ring, e) // fails the test if the INSERT is refused
}

// A pdf that is not base64 fails the row naming the field; encoding/json
// alone reports "illegal base64 data at input byte N", naming nothing.
func TestPayload_PDFNotBase64NamesTheField(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	id := insertRow(t, pool, "invoice", map[string]any{"to": "ada@example.com", "subject": "Invoice", "invoice_number": "INV-1", "pdf": "not base64!"})
	sender := newFakeSender(nil)
	if _, err := newDispatcher(t, pool, sender).runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	st := getRow(t, pool, id)
	if st.Status != "failed" || !strings.Contains(lastErr(st), "payload.pdf") || !strings.Contains(lastErr(st), "base64") {
		t.Fatalf("row %s, last_error %q; want failed naming payload.pdf and base64", st.Status, lastErr(st))
	}
	if n := sender.callsFor(id); n != 0 {
		t.Fatalf("sent %d times", n)
	}
}
