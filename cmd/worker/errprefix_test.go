package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// An operator command's error says each package's prefix once: a refusal
// wrapped by its caller reads "webhook: not found: endpoint X", not
// "webhook: rotate secret of endpoint X: webhook: not found: endpoint X".
// Every command that takes a row id is run with an id no row has; a flag
// refused for its value is named once too.
func TestCommandErrors_SayEachPrefixOnce(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "LOG_LEVEL": "error"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	const id = "0193f5a1-0000-7000-8000-00000000dead"
	for _, args := range [][]string{
		{"endpoints", "rotate-secret", id},
		{"endpoints", "disable", id},
		{"endpoints", "enable", id},
		{"endpoints", "limit", id, "--rate", "1"},
		{"endpoints", "traceparent", id, "on"},
		{"endpoints", "order-on-failure", id, "block"},
		{"requeue", "delivery", id},
		{"requeue", "webhook", id},
		{"requeue", "email", id},
		{"cancel", "webhook", id},
		{"cancel", "email", id},
		{"replay", "event", id},
		{"replay", "endpoint", id, "--since", "24h"},
		{"ordering", "skip", id},
	} {
		var out, errOut bytes.Buffer
		code := runMain(args, lookup, &out, &errOut)
		msg := errOut.String()
		if code != 1 || !strings.Contains(msg, id) {
			t.Errorf("worker %s: exit %d, stderr %q; want a refusal naming the id", strings.Join(args, " "), code, msg)
			continue
		}
		_, text, _ := strings.Cut(msg, ": ") // after "worker cancel webhook: "
		for _, prefix := range []string{"webhook:", "outbox:", "render:", "smtp:"} {
			if strings.Count(text, prefix) > 1 {
				t.Errorf("worker %s: %q says %s more than once", strings.Join(args, " "), msg, prefix)
			}
		}
	}

	// A flag's bad value: the flag error names the flag, and what it
	// wraps does not name it again.
	var out, errOut bytes.Buffer
	if code := runMain([]string{"replay", "endpoint", id, "--since", "2020"}, lookup, &out, &errOut); code != 2 {
		t.Fatalf("replay endpoint --since 2020: exit %d, stderr %q; want a usage error", code, errOut.String())
	}
	if line, _, _ := strings.Cut(errOut.String(), "\n"); strings.Count(line, "--since") != 1 || !strings.Contains(line, "want an RFC3339 time") {
		t.Errorf("replay endpoint --since 2020: %q; want --since named once, and what it wants", line)
	}
}
