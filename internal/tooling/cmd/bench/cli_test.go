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
	if out := stdout.String(); !strings.Contains(out, "usage: go run ./internal/tooling/cmd/bench") || !strings.Contains(out, "-relay-delay") {
		t.Errorf("--help does not list the flags:\n%s", out)
	}
}

// TestRunMain_BadWebhookLists: a webhook list flag that is not positive
// integers is a usage error (exit 2), before any database is touched.
func TestRunMain_BadWebhookLists(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--only", "pool-webhook", "--webhook-endpoints", "1,0"},
		{"--only", "pool-webhook", "--webhook-replicas", "three"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runMain(t.Context(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v exited %d, want 2: %s", args, code, stderr.String())
		}
	}
}

// TestRunMain_WebhookFairHoldAllAlone: --webhook-fair-hold-all without
// --webhook-fair-hold is a usage error (exit 2), before any database is
// touched.
func TestRunMain_WebhookFairHoldAllAlone(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := []string{"--only", "pool-webhook-fair", "--webhook-fair-hold-all"}
	if code := runMain(t.Context(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--webhook-fair-hold") {
		t.Errorf("%v exited %d, want 2 and a word on --webhook-fair-hold: %s", args, code, stderr.String())
	}
}
