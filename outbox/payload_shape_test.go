package outbox

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// What the decoder refuses for a payload's shape, the table refuses at
// insert (migration 00028), in the application's own transaction, naming
// the field: a plain-SQL row such as {"to": ["ada@…", "bob@…"]} was
// accepted and failed at send time, where only a corrected row could help.
// Every field of Payload is covered (a value of no type it takes is
// refused naming payload.<field>, and the decoder refuses the same
// document); each field's own types — a string, null, a sealed envelope
// where a secret may be sealed, an integer for attempt_number — and keys
// Payload does not know, of any type, are accepted.
func TestPlainSQL_PayloadShapeRefusedByTheTable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	insert := func(payload string) error {
		_, err := pool.Exec(ctx, `INSERT INTO email_outbox (kind, customer_id, payload) VALUES ('raw', 'c', $1::jsonb)`, payload)
		return err
	}
	refused := func(name, payload, field string) {
		t.Helper()
		err := insert(payload)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ColumnName != "payload" ||
			!strings.Contains(pgErr.Message, "payload."+field+" ") {
			t.Errorf("%s: insert of %s = %v; want check_violation naming payload.%s", name, payload, err, field)
		}
		var p Payload
		if json.Unmarshal([]byte(payload), &p) == nil {
			t.Errorf("%s: the table refuses %s, which the decoder takes", name, payload)
		}
	}

	for _, field := range payloadFieldNames {
		refused("a field as an array", `{"`+field+`": ["ada@example.com", "bob@example.com"]}`, field)
		refused("a field as an object", `{"`+field+`": {"a": 1}}`, field)
		refused("a field as a boolean", `{"`+field+`": true}`, field)
	}
	for _, tc := range []struct{ name, payload, field string }{
		{"two recipients in an array", `{"to": ["ada@example.com", "bob@example.com"], "subject": "s", "text": "t"}`, "to"},
		{"a subject that is a number", `{"to": "ada@example.com", "subject": 42, "text": "t"}`, "subject"},
		{"a dunning attempt as a string", `{"to": "ada@example.com", "subject": "s", "text": "t", "attempt_number": "3"}`, "attempt_number"},
		{"a dunning attempt that is no integer", `{"to": "ada@example.com", "subject": "s", "text": "t", "attempt_number": 1.5}`, "attempt_number"},
		{"a dunning attempt written 2.0", `{"attempt_number": 2.0}`, "attempt_number"},
		{"a dunning attempt past int64", `{"to": "ada@example.com", "subject": "s", "text": "t", "attempt_number": 9223372036854775808}`, "attempt_number"},
		{"a string field as a number", `{"to": "ada@example.com", "subject": "s", "text": 7}`, "text"},
	} {
		refused(tc.name, tc.payload, tc.field)
	}

	for _, payload := range []string{
		`{}`,
		`{"to": "Ada <ada@example.com>", "subject": "s", "text": "t", "html": "<p>t</p>", "pdf_name": "a.pdf", "pdf": "JVBERi0xLjQ=",
			"name": "Ada", "org_name": "Acme", "invoice_number": "1", "amount_due": "€1", "due_date": "today", "attempt_number": 3, "trigger": "x",
			"setup_url": "https://x/s", "update_url": "https://x/u", "password_reset_url": "https://x/r", "invite_url": "https://x/i", "public_token": "tok"}`,
		`{"to": null, "subject": null, "attempt_number": null, "pdf": null}`,
		`{"attempt_number": -9223372036854775808}`,
		`{"setup_url": {"enc": "v1", "kid": "k1", "n": "bm9uY2U=", "ct": "Y3Q="}, "pdf": {"enc": "v1", "kid": "k1", "n": "bm9uY2U=", "ct": "Y3Q=", "t": "bytes"}}`,
		`{"items": [1, 2], "customer": {"tier": "gold"}, "vip": true}`,
	} {
		if err := insert(payload); err != nil {
			t.Errorf("insert of %s = %v; want accepted", payload, err)
		}
	}
}
