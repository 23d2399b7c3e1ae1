package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// worker show tells the story of what it is given, exits 1 naming what it
// searched when nothing matches, and 2 for input that cannot name a row.
func TestShow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	var failed, sent string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, invoice_id, payload, status, attempts, last_error)
		VALUES ('invoice', 'cus_42', 'INV-1042', '{"to":"ada@example.com","subject":"Invoice","invoice_number":"1042","update_url":"https://x/SECRET-u"}',
		'failed', 5, '550 mailbox unavailable') RETURNING id`).Scan(&failed); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, invoice_id, payload, status, attempts, dispatched_at)
		VALUES ('invoice', 'cus_42', 'INV-1042', '{"to":"ada@example.com","subject":"Invoice","invoice_number":"1042"}',
		'dispatched', 1, now()) RETURNING id`).Scan(&sent); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		if k == "DATABASE_URL" {
			return url, true
		}
		return "", false
	}
	show := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runMain(append([]string{"show"}, args...), env, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{"invoice", []string{"INV-1042"}, 0, []string{`invoice "INV-1042": 2 emails`, "FAILED", "DISPATCHED",
			"last error: 550 mailbox unavailable", "update_url present", "pdf scrubbed", "fix: worker requeue email " + failed,
			"send a new email: a sent row's links and PDF are gone"}, ""},
		{"email id", []string{sent}, 0, []string{"email " + sent, "DISPATCHED", "dispatched 20"}, ""},
		{"customer", []string{"cus_42", "--kind", "customer"}, 0, []string{`customer "cus_42": 2 emails`}, ""},
		{"recipient", []string{"ADA@example.com"}, 0, []string{`recipient "ADA@example.com": 2 emails`}, ""},
		{"unknown id", []string{"00000000-0000-4000-8000-000000000000"}, 1, nil,
			`nothing matches "00000000-0000-4000-8000-000000000000": searched email_outbox by id, webhook_events by id, webhook_deliveries by id, webhook_endpoints by id, webhook_outbox by id`},
		{"unknown invoice", []string{"INV-404"}, 1, nil, "searched email_outbox by invoice_id, email_outbox by customer_id"},
		{"unknown forced kind", []string{"INV-1042", "--kind", "customer"}, 1, nil, "searched email_outbox by customer_id"},
		{"malformed uuid", []string{"1234abcd-12-1234-1234-1234567890ab"}, 2, nil, "is not a UUID"},
		{"forced id kind, not a uuid", []string{"INV-1042", "--kind", "event"}, 2, nil, "--kind event takes a UUID"},
		{"bad address", []string{"a@b@c", "--kind", "recipient"}, 2, nil, "not a single valid address"},
		{"invalid UTF-8", []string{"\xff"}, 2, nil, "invalid UTF-8 or a NUL byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := show(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("worker show %v: exit %d, stderr %q; want %d and %q\n%s", tc.args, code, errOut, tc.code, tc.stderr, out)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(out, w) {
					t.Errorf("worker show %v lacks %q:\n%s", tc.args, w, out)
				}
			}
			if strings.Contains(out+errOut, "SECRET-u") {
				t.Errorf("worker show %v prints a secret:\n%s", tc.args, out)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		code, out, errOut := show("INV-1042", "--json")
		var s struct {
			Kind   string `json:"kind"`
			Emails []struct {
				ID, Status, Fix string
				Secrets         []struct{ Key, State string }
			} `json:"emails"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s.Kind != "invoice" || len(s.Emails) != 2 {
			t.Fatalf("--json: exit %d, %q\n%s", code, errOut, out)
		}
		for _, e := range s.Emails {
			if e.ID == failed && (len(e.Secrets) != 1 || e.Secrets[0] != struct{ Key, State string }{"update_url", "present"} ||
				e.Fix != "worker requeue email "+failed) {
				t.Fatalf("--json, the failed row: %+v", e)
			}
		}
		if strings.Contains(out, "SECRET-u") {
			t.Fatal("--json prints a secret")
		}
	})
}
