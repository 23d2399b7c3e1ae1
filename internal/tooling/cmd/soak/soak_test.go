package main

import (
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/internal/tooling/harness/gobuild"
	"github.com/postbox/postbox/internal/tooling/harness/soak"
)

// TestSoak_CrashesAndFaultsLoseNothing is the CI-sized soak (docs/SOAK.md):
// three worker processes drain 1,500 emails and 300 events × 3 endpoints
// while a worker is kill -9'd every 2–2.5 s for 28 s (at least 11 kills)
// and Postgres is restarted once, against an SMTP sink answering 451, 550
// or nothing and receivers answering 500 or timing out. Nothing may be
// lost, every duplicate must have a crash, the restart or a lease expiry
// behind it, and the failed emails must be exactly the ones given a
// permanent error.
//
// The kills stop after 28 s because a killed worker's email rows come back
// only when their claim lease expires, 67 s later with the shortest leases
// the code allows: the soak takes about 100 s (plus the worker build).
func TestSoak_CrashesAndFaultsLoseNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the ~2 min crash soak in -short mode; CI runs it (go test ./internal/tooling/cmd/soak)")
	}
	if _, err := pgserver.BinDir(); err != nil {
		t.Fatalf("the soak needs Postgres server binaries (initdb, pg_ctl) for a cluster of its own, which it restarts: %v", err)
	}
	opts := soak.Defaults()
	bin, err := gobuild.Worker(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts.WorkerBinary = bin
	opts.Emails, opts.Events, opts.Endpoints, opts.Workers = 1500, 300, 3, 3
	opts.Chaos = 28 * time.Second
	opts.KillEveryMin, opts.KillEveryMax = 2*time.Second, 2500*time.Millisecond
	opts.PGRestartAt = 0.4
	opts.Timeout = 3 * time.Minute
	opts.Progress = t.Output()

	tally, err := soak.Run(t.Context(), opts)
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	var report strings.Builder
	tally.Print(&report)
	t.Logf("tally:\n%s", report.String())

	for _, p := range tally.Problems() {
		t.Error(p)
	}
	if tally.KillsRunning < 10 {
		t.Errorf("%d kill -9s hit a running worker (%d in all), want at least 10", tally.KillsRunning, tally.Kills)
	}
	if tally.Restart == nil || tally.Restart.Err != "" {
		t.Errorf("Postgres was not restarted mid-run: %+v", tally.Restart)
	}
	if got := tally.EmailStatus["dispatched"] + tally.EmailStatus["failed"]; got != opts.Emails {
		t.Errorf("%d emails dispatched or failed, want all %d", got, opts.Emails)
	}
	if n := len(tally.FailedDeliveries); n > 0 {
		// Allowed (an operator replays them), but with compressed backoff
		// and a few percent of faults it should not happen: show it.
		t.Logf("%d deliveries exhausted their retries: %v", n, tally.FailedDeliveries)
	}
}

func TestSoakFlags(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]time.Duration{
		"3s-6s":   {3 * time.Second, 6 * time.Second},
		"4s":      {4 * time.Second, 4 * time.Second},
		"2s-2.5s": {2 * time.Second, 2500 * time.Millisecond},
	} {
		lo, hi, err := parseDurationRange(in)
		if err != nil || lo != want[0] || hi != want[1] {
			t.Errorf("parseDurationRange(%q) = %s, %s, %v; want %s, %s", in, lo, hi, err, want[0], want[1])
		}
	}
	for _, bad := range []string{"", "6s-3s", "0s", "3", "3s-"} {
		if _, _, err := parseDurationRange(bad); err == nil {
			t.Errorf("parseDurationRange(%q) accepted", bad)
		}
	}
	for in, want := range map[string]float64{"40%": 0.4, "0.4": 0.4, "100%": 1, "never": -1} {
		if got, err := parseShare(in); err != nil || got != want {
			t.Errorf("parseShare(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"140%", "-1", "x"} {
		if _, err := parseShare(bad); err == nil {
			t.Errorf("parseShare(%q) accepted", bad)
		}
	}
}
