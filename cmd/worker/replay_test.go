package main

import (
	"testing"
	"time"

	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/webhook"
)

// A replay's summary accounts for every delivery it made: those queued
// behind their endpoint's limits got no attempt yet and are counted as
// such, not left out of "0 succeeded, 0 will retry, 0 failed".
func TestAttemptsText(t *testing.T) {
	t.Parallel()
	schedule := leases.Backoff{30 * time.Second}
	for _, tc := range []struct {
		name       string
		tally      webhook.Tally
		deliveries int
		want       string
	}{
		{"all sent", webhook.Tally{Sent: 3}, 3, "3 succeeded, 0 will retry, 0 failed"},
		{"a retry", webhook.Tally{Sent: 1, Retried: 1}, 2, "1 succeeded, 1 will retry, 0 failed (first retry in about 30s)"},
		{"behind a rate limit", webhook.Tally{}, 5, "0 succeeded, 0 will retry, 0 failed, 5 queued behind the endpoint's limits (the retry worker sends them as it admits them)"},
		{"released and held", webhook.Tally{Sent: 1, Released: 1}, 4, "1 succeeded, 0 will retry, 0 failed, 1 left to the retry worker, 2 queued behind the endpoint's limits (the retry worker sends them as it admits them)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := attemptsText(tc.tally, tc.deliveries, schedule); got != tc.want {
				t.Fatalf("attemptsText = %q\nwant %q", got, tc.want)
			}
		})
	}
}
