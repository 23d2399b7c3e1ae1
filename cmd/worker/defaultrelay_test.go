package main

import (
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
)

// TestWarnDefaultRelay: `worker run` with no SMTP_HOST, SMTP_PORT or
// SMTP_TLS says at boot where mail will go and how to reach a local
// Mailpit; any of the three set, it trusts the operator.
func TestWarnDefaultRelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string // "" = no warning
	}{
		{nil, "mail goes to the default relay, localhost:587, STARTTLS required; for a local Mailpit set SMTP_HOST=localhost SMTP_PORT=1025 SMTP_TLS=none"},
		{map[string]string{"SMTP_HOST": "  "}, "mail goes to the default relay"},
		{map[string]string{"SMTP_HOST": "relay.example.com"}, ""},
		{map[string]string{"SMTP_PORT": "2525"}, ""},
		{map[string]string{"SMTP_TLS": "none"}, ""},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			var stderr logbuf.Buffer
			env, err := LoadEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, &stderr, &stderr, true)
			if err != nil {
				t.Fatal(err)
			}
			warnDefaultRelay(env)
			got := stderr.String()
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("env %v: logged %q, want %q", tc.env, got, tc.want)
			}
		})
	}
}
