package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestSuppressionsCommands drives worker suppressions add, check, list and
// remove against a real database: an entry added by hand is listed and
// checked with its reason and who; removal names who lifted it in the log;
// removing an address not on the list fails (exit 1).
func TestSuppressionsCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	worker := cliAgainst(url)
	if code, out, errOut := worker("suppressions", "add", "Ada@Example.com", "--reason", "asked us to stop", "--by", "alice"); code != 0 ||
		!strings.Contains(out, "ada@example.com suppressed") {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	if code, out, _ := worker("suppressions", "check", "ada@example.com"); code != 0 || !strings.Contains(out, "asked us to stop") ||
		!strings.Contains(out, "alice") || !strings.Contains(out, "manual") {
		t.Fatalf("check: %d %q", code, out)
	}
	code, out, _ := worker("suppressions", "list", "--json")
	var list []suppressionJSON
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Email != "ada@example.com" {
		t.Fatalf("list --json: %d %q", code, out)
	}
	if code, out, _ := worker("suppressions", "list", "--source", "complaint"); code != 0 || !strings.Contains(out, "no suppressed addresses") {
		t.Fatalf("list --source complaint: %d %q", code, out)
	}
	if code, _, errOut := worker("suppressions", "list", "--source", "whim"); code != 2 || !strings.Contains(errOut, "--source") {
		t.Fatalf("list --source whim: %d %q; want a usage error", code, errOut)
	}
	if code, out, errOut := worker("suppressions", "remove", "ada@example.com", "--by", "bob"); code != 0 || !strings.Contains(out, "lifted") {
		t.Fatalf("remove: %d %q %q", code, out, errOut)
	}
	if code, out, _ := worker("suppressions", "check", "ada@example.com", "--json"); code != 0 || !strings.Contains(out, `"suppressed": false`) {
		t.Fatalf("check after remove: %d %q", code, out)
	}
	if code, _, errOut := worker("suppressions", "remove", "ada@example.com"); code != 1 || !strings.Contains(errOut, "not suppressed") {
		t.Fatalf("second remove: %d %q; want 1, not suppressed", code, errOut)
	}
	if code, _, errOut := worker("suppressions", "add", "not an address", "--reason", "x"); code != 1 || !strings.Contains(errOut, "address") {
		t.Fatalf("add of a bad address: %d %q", code, errOut)
	}
	pool := pgtest.Connect(t, url)
	var actors string
	if err := pool.QueryRow(t.Context(), `SELECT string_agg(action || ':' || actor, ',' ORDER BY id) FROM email_suppression_log`).Scan(&actors); err != nil ||
		actors != "added:alice,lifted:bob" {
		t.Errorf("log %q (%v); want added:alice,lifted:bob", actors, err)
	}
}

// A command a person runs writes its log lines as sentences on stderr, not
// the JSON `run` writes for a collector.
func TestCLICommandsLogSentences(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "LOG_LEVEL": "info"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var out, errOut bytes.Buffer
	if code := runMain([]string{"suppressions", "add", "cy@example.com", "--reason", "asked"}, lookup, &out, &errOut); code != 0 {
		t.Fatalf("add: exit %d: %s", code, errOut.String())
	}
	errOut.Reset()
	if code := runMain([]string{"suppressions", "remove", "cy@example.com", "--by", "alice"}, lookup, &out, &errOut); code != 0 {
		t.Fatalf("remove: exit %d: %s", code, errOut.String())
	}
	if got := errOut.String(); strings.Contains(got, "{") || !strings.Contains(got, "suppression lifted (email=cy@example.com, by=alice") {
		t.Fatalf("stderr of worker suppressions remove: %q; want the log line as a sentence", got)
	}
}
