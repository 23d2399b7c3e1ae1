package leases

import (
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/envtest"
)

// TestLoadBoundsEverySetting locks the settings' ranges: every override is held
// to a sane range, and the chain is computed without overflow, so a value
// such as EMAIL_BATCH_SIZE=6004799503160663 (whose 60 s product wraps to
// 100 s) cannot slip past the chain. The error names the variable and the
// range.
func TestLoadBoundsEverySetting(t *testing.T) {
	t.Parallel()

	env := envtest.Lookup
	for _, tc := range []struct {
		name string
		kv   []string
		want []string // substrings of the error; nil = must load
	}{
		{"overflowing batch size", []string{EnvBatchSize, "6004799503160663", EnvBatchTimeout, "120s"}, []string{EnvBatchSize, "1..1000"}},
		{"batch size just past the range", []string{EnvBatchSize, "1001"}, []string{EnvBatchSize, "1..1000"}},
		{"negative batch size", []string{EnvBatchSize, "-1"}, []string{EnvBatchSize, "1..1000"}},
		{"max batch size with a timeout that fits", []string{EnvBatchSize, "1000", EnvBatchTimeout, "16h40m0s"}, nil},
		{"overflowing retry batch", []string{EnvRetryClaimBatch, "709490156681136600"}, []string{EnvRetryClaimBatch, "1..1000"}},
		{"batch timeout over a day", []string{EnvBatchTimeout, "25h"}, []string{EnvBatchTimeout, "1s..24h0m0s"}},
		{"negative batch timeout", []string{EnvBatchTimeout, "-5s"}, []string{EnvBatchTimeout, "1s..24h0m0s"}},
		{"huge lease slack", []string{EnvLeaseSlack, "2562047h"}, []string{EnvLeaseSlack, "0s..24h0m0s"}},
		{"negative lease slack", []string{EnvLeaseSlack, "-1h"}, []string{EnvLeaseSlack, "0s..24h0m0s"}},
		{"huge birth lease", []string{EnvBirthLeaseWindow, "100000h"}, []string{EnvBirthLeaseWindow, "1s..24h0m0s"}},
		{"day-long settings that fit", []string{EnvBatchTimeout, "24h", EnvLeaseSlack, "24h", EnvBirthLeaseWindow, "24h"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(env(tc.kv...))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Load(%v): %v", tc.kv, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load(%v) accepted %+v (ClaimLease(BatchSize)=%s), want an error naming %v", tc.kv, c, c.ClaimLease(c.BatchSize), tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Load(%v) error = %q, want it to contain %q", tc.kv, err, w)
				}
			}
		})
	}
}

// TestValidateBoundsGoConfig holds a Config built in Go (no environment) to
// the same ranges, and the derived leases never wrap.
func TestValidateBoundsGoConfig(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		field  string
	}{
		{"wrapping batch", func(c *Config) { c.BatchSize, c.BatchTimeout = 6004799503160663, 120*time.Second }, "BatchSize"},
		{"wrapping retry batch", func(c *Config) { c.RetryClaimBatch = 709490156681136600 }, "RetryClaimBatch"},
		{"per-row budget over a day", func(c *Config) { c.PerRowBudget = 25 * time.Hour }, "PerRowBudget"},
		{"delivery budget over a day", func(c *Config) { c.DeliveryBudget = 25 * time.Hour }, "DeliveryBudget"},
		{"negative slack", func(c *Config) { c.LeaseSlack = -time.Hour }, "LeaseSlack"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate(%+v) = %v, want an error naming %s", c, err, tc.field)
			}
		})
	}

	// The derived leases saturate rather than wrap, whatever n a caller passes.
	c := Default()
	if got := c.ClaimLease(6004799503160663); got <= c.ClaimLease(1) {
		t.Errorf("ClaimLease(6004799503160663) = %s: wrapped below ClaimLease(1) = %s", got, c.ClaimLease(1))
	}
	if got := c.RetryClaimLease(709490156681136600); got <= c.RetryClaimLease(1) {
		t.Errorf("RetryClaimLease(709490156681136600) = %s: wrapped", got)
	}
}
