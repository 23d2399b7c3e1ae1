package leases

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/envtest"
)

// TestLeaseInvariantChain locks the derived constants (see
// docs/design/outbox-transport.md, Derived constants): the shipped constants
// satisfy BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease(BatchSize) and
// the webhook analogues, and keep the exact derived values.
func TestLeaseInvariantChain(t *testing.T) {
	t.Parallel()

	if err := Default().Validate(); err != nil {
		t.Fatalf("shipped lease constants break the chain: %v", err)
	}
	if time.Duration(BatchSize)*PerRowBudget > BatchTimeout {
		t.Fatalf("BatchSize×PerRowBudget = %s > BatchTimeout %s", time.Duration(BatchSize)*PerRowBudget, BatchTimeout)
	}
	if BatchTimeout >= Default().ClaimLease(BatchSize) {
		t.Fatalf("BatchTimeout %s ≥ ClaimLease(BatchSize) %s", BatchTimeout, Default().ClaimLease(BatchSize))
	}
	if DeliveryBudget >= BirthLeaseWindow {
		t.Fatalf("DeliveryBudget %s ≥ BirthLeaseWindow %s", DeliveryBudget, BirthLeaseWindow)
	}

	// The derived figures themselves, so a silent retune shows up here.
	for _, tc := range []struct {
		name      string
		got, want time.Duration
	}{
		{"PerRowBudget", PerRowBudget, 60 * time.Second},
		{"ClaimLease(BatchSize)", Default().ClaimLease(BatchSize), 360 * time.Second},
		{"ClaimLease(1)", Default().ClaimLease(1), 120 * time.Second},
		{"BatchTimeout", BatchTimeout, 300 * time.Second},
		{"BirthLeaseWindow", BirthLeaseWindow, 120 * time.Second},
		{"RetryClaimLease(RetryClaimBatch)", Default().RetryClaimLease(RetryClaimBatch), 190 * time.Second},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	if BatchSize != 5 || RetryClaimBatch != 10 {
		t.Errorf("BatchSize=%d RetryClaimBatch=%d, want 5 and 10", BatchSize, RetryClaimBatch)
	}
}

func TestValidateNamesBrokenLink(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		link   string
	}{
		{"batch too big for timeout", func(c *Config) { c.BatchSize = 6 }, "BatchSize×PerRowBudget ≤ BatchTimeout"},
		{"timeout reaches lease", func(c *Config) { c.BatchTimeout = c.ClaimLease(c.BatchSize) }, "BatchTimeout < ClaimLease(BatchSize)"},
		{"no slack", func(c *Config) { c.LeaseSlack = 0 }, "BatchTimeout < ClaimLease(BatchSize)"},
		{"birth lease too short", func(c *Config) { c.BirthLeaseWindow = 10 * time.Second }, "DeliveryBudget < BirthLeaseWindow"},
		{"batch of one cannot start its row", func(c *Config) { c.BatchSize, c.BatchTimeout = 1, c.PerRowBudget }, "PerRowBudget < BatchTimeout"},
		{"zero batch", func(c *Config) { c.BatchSize = 0 }, "BatchSize ≥ 1"},
		{"zero retry batch", func(c *Config) { c.RetryClaimBatch = 0 }, "RetryClaimBatch ≥ 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tc.mutate(&c)
			var chainErr *ChainError
			if err := c.Validate(); !errors.As(err, &chainErr) || chainErr.Link != tc.link {
				t.Fatalf("Validate() = %v, want broken link %q", err, tc.link)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()

	env := envtest.Lookup
	for _, tc := range []struct {
		name    string
		lookup  func(string) (string, bool)
		wantErr string
	}{
		{"defaults", env(), ""},
		{"valid override", env(EnvBatchSize, "4", EnvBatchTimeout, "250s"), ""},
		{"bad int names variable", env(EnvBatchSize, "five"), EnvBatchSize},
		{"bad duration names variable", env(EnvBatchTimeout, "soon"), EnvBatchTimeout},
		{"override breaks chain names link", env(EnvBatchTimeout, "360s"), "BatchTimeout < ClaimLease(BatchSize)"},
		{"retry batch override names variable and range", env(EnvRetryClaimBatch, "0"), "WEBHOOK_RETRY_BATCH=0 is out of range: must be in 1..1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(tc.lookup)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Load error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// ValidateAttempts refuses webhook leases an attempt and its mark cannot
// both fit in, naming the link and the variable to change.
func TestValidateAttemptsNamesBrokenLink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		link   string
	}{
		{"the defaults", func(*Config) {}, ""},
		{"birth lease without room for the mark", func(c *Config) { c.BirthLeaseWindow = c.DeliveryBudget + MarkTimeout }, "DeliveryBudget + MarkTimeout < BirthLeaseWindow"},
		{"birth lease with room for the mark", func(c *Config) { c.BirthLeaseWindow = c.DeliveryBudget + MarkTimeout + time.Second }, ""},
		{"slack without room for a retry's mark", func(c *Config) { c.LeaseSlack = MarkTimeout }, "MarkTimeout < LeaseSlack"},
		{"slack with room for a retry's mark", func(c *Config) { c.LeaseSlack = MarkTimeout + time.Second }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tc.mutate(&c)
			err := c.ValidateAttempts()
			var chainErr *ChainError
			switch {
			case tc.link == "" && err != nil:
				t.Fatalf("ValidateAttempts() = %v, want nil", err)
			case tc.link != "" && (!errors.As(err, &chainErr) || chainErr.Link != tc.link):
				t.Fatalf("ValidateAttempts() = %v, want broken link %q", err, tc.link)
			}
		})
	}
}
