package outbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// ListByCustomer reads a 30-day window; ListByInvoice has no age bound (see
// docs/design/outbox-transport.md, Retention). Neither returns the secret
// payload keys.
func TestReadAPIs_CustomerWindowAndUnboundedInvoice(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)

	insert := func(customer, invoice string, ageDays int) string {
		t.Helper()
		body, _ := json.Marshal(secretPayload())
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, invoice_id, payload, created_at)
VALUES ('raw', $1, NULLIF($2, ''), $3, now() - make_interval(days => $4)) RETURNING id::text`,
			customer, invoice, body, ageDays).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	old := insert("cus_1", "inv_1", 45)
	recent := insert("cus_1", "inv_1", 2)
	newest := insert("cus_1", "", 0)
	insert("cus_2", "inv_2", 1)

	byCustomer, err := ListByCustomer(ctx, pool, "cus_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := recordIDs(byCustomer); !equalIDs(got, []string{newest, recent}) {
		t.Errorf("ListByCustomer = %v, want the last 30 days newest first %v", got, []string{newest, recent})
	}
	byInvoice, err := ListByInvoice(ctx, pool, "inv_1")
	if err != nil {
		t.Fatal(err)
	}
	if got := recordIDs(byInvoice); !equalIDs(got, []string{recent, old}) {
		t.Errorf("ListByInvoice = %v, want every row of the invoice however old %v", got, []string{recent, old})
	}
	if limited, err := ListByCustomer(ctx, pool, "cus_1", 1); err != nil || len(limited) != 1 {
		t.Errorf("ListByCustomer limit 1: %d records, %v", len(limited), err)
	}

	r := byInvoice[0]
	if r.To != "ada@example.com" || r.InvoiceNumber != "INV-0042" || r.AttemptNumber != 2 || r.Trigger != "invoice.finalized" ||
		r.Status != StatusPending || r.InvoiceID != "inv_1" || r.CustomerID != "cus_1" || r.Kind != KindRaw {
		t.Errorf("record %+v, want the timeline fields", r)
	}
	var payload map[string]any
	if err := json.Unmarshal(r.Payload, &payload); err != nil {
		t.Fatal(err)
	}
	for _, k := range scrubbedPayloadKeys {
		if _, ok := payload[k]; ok {
			t.Errorf("read API returned secret key %q of a pending row", k)
		}
	}
	if payload["plan"] != "pro" {
		t.Errorf("read API dropped a non-secret key: %v", payload)
	}
}

func recordIDs(recs []Record) []string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// Nothing in this package deletes email_outbox rows: dispatched rows are the
// delivery record (see docs/design/outbox-transport.md, Retention). Other
// tables may be deleted from (lifting a suppression deletes its
// email_suppressions row).
func TestNothingDeletesEmailRows(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	deleteStmt := regexp.MustCompile(`(?i)\b(DELETE\s+FROM\s+(ONLY\s+)?email_outbox|TRUNCATE\b[^;]*\bemail_outbox)\b`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if loc := deleteStmt.FindIndex(src); loc != nil {
			t.Errorf("%s contains %q: nothing may delete email_outbox rows", f, src[loc[0]:loc[1]])
		}
	}
}
