package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The event-types commands against a real database: check reads a
// directory without one and exits 2 naming a bad file; sync writes the
// catalog and says what changed; list shows it; an endpoint's typo'd
// subscription is refused with the nearest type; show names a deprecated
// type's event as such.
func TestEventTypesCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	env := map[string]string{"DATABASE_URL": url, "LOG_LEVEL": "error"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	worker := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := runMain(args, lookup, &out, &errOut); code != want {
			t.Fatalf("worker %s: exit %d, want %d; stdout %q, stderr %q", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("invoice.paid.json", `{"description": "An invoice was paid.\nIn full.", "schema": {"type": "object", "required": ["amount"]}, "example": {"amount": 1}}`)
	write("invoice.voided.json", `{"description": "An invoice was voided.", "deprecated": true}`)

	if out, _ := worker(0, "event-types", "check", dir); !strings.Contains(out, "2 event types, 1 with a schema") {
		t.Fatalf("check: %q", out)
	}
	if out, _ := worker(0, "event-types", "sync", dir); !strings.Contains(out, "invoice.paid, invoice.voided added, none updated, none removed") {
		t.Fatalf("sync: %q", out)
	}
	list, _ := worker(0, "event-types", "list")
	if !regexp.MustCompile(`invoice\.paid\s+yes\s+yes\s+no\s+An invoice was paid\.\n`).MatchString(list) ||
		!regexp.MustCompile(`invoice\.voided\s+no\s+no\s+yes\s+An invoice was voided\.`).MatchString(list) {
		t.Fatalf("list:\n%s", list)
	}
	if _, errOut := worker(1, "endpoints", "create", "--url", "https://example.com/in", "--event-types", "invoice.piad"); !strings.Contains(errOut, "did you mean invoice.paid?") {
		t.Fatalf("create subscribed to invoice.piad: stderr %q, want the nearest type", errOut)
	}

	write("invoice.paid.json", `{"description": "d", "schema": {"type": "object"}, "example": [1]}`)
	if _, errOut := worker(2, "event-types", "check", dir); !strings.Contains(errOut, "invoice.paid.json") || !strings.Contains(errOut, "example does not match") {
		t.Fatalf("check of a mismatched example: stderr %q", errOut)
	}
	if _, errOut := worker(2, "event-types", "sync", dir); !strings.Contains(errOut, "invoice.paid.json") {
		t.Fatalf("sync of a mismatched example: stderr %q", errOut)
	}

	pool := pgtest.Connect(t, url)
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_events (event_type, payload) VALUES ('invoice.voided', '{}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if out, _ := worker(0, "show", id); !strings.Contains(out, "(invoice.voided, a deprecated type)") {
		t.Fatalf("show of a deprecated type's event:\n%s", out)
	}
}
