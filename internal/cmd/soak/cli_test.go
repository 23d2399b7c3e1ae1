package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunMain_HelpAndUsageErrors: --help lists every flag and exits 0;
// an unknown flag or a stray argument exits 2 with the usage, and neither
// runs the soak.
func TestRunMain_HelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stdout for 0, stderr otherwise
	}{
		{"help", []string{"--help"}, 0, "usage: go run ./internal/cmd/soak"},
		{"short help", []string{"-h"}, 0, "usage: go run ./internal/cmd/soak"},
		{"unknown flag", []string{"--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{"stray argument", []string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if code := runMain(t.Context(), tc.args, &stdout, &stderr); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			out := stderr.String()
			if tc.code == 0 {
				out = stdout.String()
				if !strings.Contains(out, "-kill-every") {
					t.Errorf("--help does not list -kill-every:\n%s", out)
				}
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
