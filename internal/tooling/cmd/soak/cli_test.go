package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunMain_HelpListsTheFlags: --help exits 0 and lists the program's
// flags (the rest of the command line is internal/tooling/harness/program's).
func TestRunMain_HelpListsTheFlags(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := runMain(t.Context(), []string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--help exited %d: %s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "usage: go run ./internal/tooling/cmd/soak") || !strings.Contains(out, "-kill-every") {
		t.Errorf("--help does not list the flags:\n%s", out)
	}
}
