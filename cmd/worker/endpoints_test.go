package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/testsupport/pgtest"
)

// The endpoint commands against a real database: limit sets what list
// shows with the breaker's state; rotate-secret prints the new secret
// once, different from the one create printed.
func TestEndpointsLimitRotateList(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "LOG_LEVEL": "error"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	worker := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := runMain(args, lookup, &out, &errOut); code != 0 {
			t.Fatalf("worker %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	secretRE := regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`)
	created := worker("endpoints", "create", "--url", "https://example.com/in")
	id := regexp.MustCompile(`endpoint (\S+) created`).FindStringSubmatch(created)[1]
	first := secretRE.FindString(created)

	worker("endpoints", "limit", id, "--rate", "2.5", "--max-in-flight", "4")
	list := worker("endpoints", "list")
	if !regexp.MustCompile(id + `\s+enabled\s+closed\s+0\s+-\s+2.5\s+4\s+-\s+-\s`).MatchString(list) {
		t.Fatalf("list does not show the breaker and limits:\n%s", list)
	}

	rotated := worker("endpoints", "rotate-secret", id, "--keep", "1h")
	secrets := secretRE.FindAllString(rotated, -1)
	if len(secrets) != 1 || secrets[0] == first || !strings.Contains(rotated, "signs too until") {
		t.Fatalf("rotate-secret printed %q, want one new secret and the old one's expiry", rotated)
	}
	if strings.Contains(worker("endpoints", "list", "--json"), "whsec_") {
		t.Fatal("list prints a secret")
	}
}
