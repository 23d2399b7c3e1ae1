package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestRunPool_FairTinyPreset runs the pool-fair section at a tiny size:
// both cases, postbox (also with a snapshot held) and the River peer. It
// checks only correctness: every one of B's rows arrived, none twice,
// every row of the table present. No timing is asserted.
func TestRunPool_FairTinyPreset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs worker processes")
	}
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	opts := PoolOptions{
		FairRows: 100,
		FairLoad: 2 * time.Second,
		FairWait: time.Minute,
		FairHold: true,
		Sections: []string{SectionPoolFair},
		Progress: testWriter{t, time.Now()},
	}
	rep, err := RunPoolURL(ctx, url, opts)
	if err != nil {
		t.Fatalf("RunPoolURL: %v", err)
	}
	var wants []wantRow
	for _, c := range fairCases {
		last := "throughput during B's load"
		if c.limited {
			last = "A's rate during B's load"
		}
		for _, p := range []string{"postbox worker run", "River peer, tuned", "postbox worker run, snapshot held"} {
			label := c.label + ": " + p + ": "
			wants = append(wants,
				wantRow{titlePoolFair, label + "B's password resets", "all 2 arrived"},
				wantRow{titlePoolFair, label + "B's invoices", "all 2 arrived"},
				wantRow{titlePoolFair, label + last, "0 duplicates"})
		}
	}
	checkRows(t, rep, wants)
	if row, _ := rep.Find(titlePoolFair, fairCases[0].label+": River peer, tuned: B's password resets"); !strings.Contains(row.Notes, "PEER_RATE=50") {
		t.Errorf("the River peer's rate limit is not in its notes: %q", row.Notes)
	}
}

func TestPoolOptions_ValidateFair(t *testing.T) {
	o := DefaultPool()
	o.FairBaseline = filepath.Join(t.TempDir(), "no-such-worker")
	if err := o.Validate(); err == nil {
		t.Error("Validate accepted a baseline binary that does not exist")
	}
	notExec := filepath.Join(t.TempDir(), "worker")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.FairBaseline = notExec
	if err := o.Validate(); err == nil {
		t.Error("Validate accepted a baseline that is not executable")
	}
	o = DefaultPool()
	o.FairLoad = 500 * time.Millisecond
	if err := o.Validate(); err == nil {
		t.Error("Validate accepted a load shorter than B's second")
	}
}

func TestPeerProcess_RateRoundTrip(t *testing.T) {
	p := PeerProcess{DatabaseURL: "postgres://x", SMTPHost: "127.0.0.1", SMTPPort: 2525, MaxWorkers: 16, Rate: 50}
	env := map[string]string{}
	for _, kv := range p.env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	got, err := PeerProcessFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if got.Rate != 50 {
		t.Errorf("Rate %d after the round trip, want 50", got.Rate)
	}
	if l := peerLimiter(got.Rate); l == nil || l.Burst() != 2 {
		t.Errorf("peerLimiter(50): %v, want a limiter of burst 2", l)
	}
	if peerLimiter(0) != nil {
		t.Error("peerLimiter(0) limits")
	}
	env[envPeerRate] = "-1"
	if _, err := PeerProcessFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil {
		t.Error("PeerProcessFromEnv accepted PEER_RATE=-1")
	}
}
