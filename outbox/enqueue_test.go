package outbox

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

func validEmail() Email {
	return Email{
		Kind:       KindRaw,
		CustomerID: "cus_1",
		Payload:    Payload{To: "Ada <ada@example.com>", Subject: "Hello", Text: "Hi"},
	}
}

// Bad input returns an error naming the field, and nothing is written.
func TestEnqueue_ValidationNamesFieldWritesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	pdf := append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte("x"), 200)...)
	for _, tc := range []struct {
		name   string
		modify func(*Email)
		limit  int
		field  string
	}{
		{"malformed kind", func(e *Email) { e.Kind = "News-Letter" }, 0, "kind"},
		{"kind over the limit", func(e *Email) { e.Kind = Kind("k" + strings.Repeat("x", MaxKindBytes)) }, 0, "kind"},
		{"data key naming a field", func(e *Email) { e.Payload.Data = map[string]any{"invite_url": "x"} }, 0, "payload.data"},
		{"data key spelling a field in another case", func(e *Email) { e.Payload.Data = map[string]any{"Invite_URL": "x"} }, 0, "payload.data"},
		{"data key that is no identifier", func(e *Email) { e.Payload.Data = map[string]any{"order id": "x"} }, 0, "payload.data"},
		{"custom kind without recipient", func(e *Email) { e.Kind, e.Payload.To = "receipt", "" }, 0, "payload.to"},
		{"custom kind with header injection in subject", func(e *Email) { e.Kind, e.Payload.Subject = "receipt", "a\nBcc: x@example.com" }, 0, "payload.subject"},
		{"no recipient", func(e *Email) { e.Payload.To = " " }, 0, "payload.to"},
		{"unparsable recipient", func(e *Email) { e.Payload.To = "ada at example.com" }, 0, "payload.to"},
		{"two recipients", func(e *Email) { e.Payload.To = "a@example.com, b@example.com" }, 0, "payload.to"},
		{"header injection in recipient", func(e *Email) { e.Payload.To = "a@example.com\r\nBcc: x@example.com" }, 0, "payload.to"},
		{"no subject", func(e *Email) { e.Payload.Subject = "" }, 0, "payload.subject"},
		{"header injection in subject", func(e *Email) { e.Payload.Subject = "Hi\nBcc: x@example.com" }, 0, "payload.subject"},
		{"no body", func(e *Email) { e.Payload.Text, e.Payload.HTML = "", "" }, 0, "payload.text"},
		{"pdf that is not a PDF", func(e *Email) { e.Payload.PDF = []byte("MZ") }, 0, "payload.pdf"},
		{"control character in pdf name", func(e *Email) { e.Payload.PDF, e.Payload.PDFName = pdf, "a\r\n.pdf" }, 0, "payload.pdf_name"},
		{"invoice without number", func(e *Email) { e.Kind = KindInvoice }, 0, "payload.invoice_number"},
		{"reset without link", func(e *Email) { e.Kind = KindPasswordReset }, 0, "payload.password_reset_url"},
		{"invite without link", func(e *Email) { e.Kind = KindMemberInvite }, 0, "payload.invite_url"},
		{"relative link", func(e *Email) { e.Payload.UpdateURL = "/billing" }, 0, "payload.update_url"},
		{"payload over the limit", func(e *Email) { e.Payload.PDF = pdf }, 200, "payload"},
		{"idempotency key over the limit", func(e *Email) { e.IdempotencyKey = strings.Repeat("k", MaxIdempotencyKeyBytes+1) }, 0, "idempotency_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			email := validEmail()
			tc.modify(&email)
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // read-only check below
			e := &Enqueuer{MaxPayloadBytes: tc.limit}
			id, err := e.Enqueue(ctx, tx, email)
			var verr *ValidationError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &verr) || verr.Field != tc.field {
				t.Fatalf("Enqueue: id %q, error %v; want a *ValidationError for field %q", id, err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name the field %q", err, tc.field)
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM email_outbox`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("invalid email wrote %d rows, want nothing", n)
			}
		})
	}
}

// Enqueue writes one pending row in the caller's transaction; the row
// exists exactly when it commits.
func TestEnqueue_WritesOneRowInTheCallersTx(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	e := &Enqueuer{}

	email := validEmail()
	email.InvoiceID = "inv_9"
	email.Payload.InviteURL = "https://app.example.com/invite/abc"
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.Enqueue(ctx, tx, email)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 0}[commit]; n != want {
			t.Errorf("commit=%v: %d rows, want %d", commit, n, want)
		}
		if !commit {
			continue
		}
		var kind, customer, invoice, status string
		var attempts int
		if err := pool.QueryRow(ctx, `SELECT kind, customer_id, invoice_id, status, attempts FROM email_outbox WHERE id = $1`, id).
			Scan(&kind, &customer, &invoice, &status, &attempts); err != nil {
			t.Fatal(err)
		}
		if kind != "raw" || customer != "cus_1" || invoice != "inv_9" || status != "pending" || attempts != 0 {
			t.Errorf("row (%s, %s, %s, %s, %d), want (raw, cus_1, inv_9, pending, 0)", kind, customer, invoice, status, attempts)
		}
		if p := getRow(t, pool, id).Payload; p["invite_url"] != "https://app.example.com/invite/abc" || p["to"] != "Ada <ada@example.com>" {
			t.Errorf("payload %v, want the email's fields under their contract names", p)
		}
	}
}

// The default size limit fits an invoice PDF of several megabytes and
// refuses what would not fit.
func TestEnqueue_DefaultLimitFitsInvoicePDF(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	for _, tc := range []struct {
		pdfBytes int
		ok       bool
	}{{5 << 20, true}, {8 << 20, false}} {
		email := validEmail()
		email.Kind = KindInvoice
		email.Payload.InvoiceNumber = "INV-1"
		email.Payload.PDF = append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte{0xA5}, tc.pdfBytes)...)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Enqueue(ctx, tx, email)
		_ = tx.Rollback(ctx)
		if ok := err == nil; ok != tc.ok {
			t.Errorf("%d MiB PDF: error %v, want accepted=%v", tc.pdfBytes>>20, err, tc.ok)
		}
	}
}
