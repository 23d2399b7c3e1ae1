package main

import (
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestDemoRunsToCompletion runs `worker demo --exit` as the README tells a
// newcomer to, and checks the summary tells the story it should.
func TestDemoRunsToCompletion(t *testing.T) {
	t.Parallel()
	// The demo creates and drops its own database on the harness's server.
	cmd, out := startWorker(t, []string{"HTTP_ADDR=" + freeAddr(t), "DATABASE_URL=" + pgtest.ServerURL(t)}, "demo", "--exit")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo failed: %v\n%s", err, out)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("demo did not finish within 3 minutes:\n%s", out)
	}
	for _, want := range []string{
		"SMTP sink: 14 messages (5 with a PDF), 0 duplicates",
		`the receipt row (kind receipt, from a template directory, by plain SQL): dispatched, received as "Your receipt for order ORD-1002"`,
		"0 sent rows still hold one",
		"failed: bounced@customer.example — recipient is suppressed",
		"the plain-SQL INSERT row: dispatched",
		"8 events (0 without a producing row)",
		"disabled: receiver answered 410 Gone",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo summary lacks %q:\n%s", want, out)
		}
	}
}
