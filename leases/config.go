package leases

import (
	"fmt"
	"strconv"
	"time"
)

// Config is the set of lease figures a worker runs with: the defaults above,
// possibly overridden from the environment. Overrides go through Validate
// like the defaults do, so no deployment can run with a broken chain.
type Config struct {
	BatchSize        int
	BatchTimeout     time.Duration
	PerRowBudget     time.Duration
	LeaseSlack       time.Duration
	BirthLeaseWindow time.Duration
	DeliveryBudget   time.Duration
	RetryClaimBatch  int
}

// Default returns the ADR-072 figures.
func Default() Config {
	return Config{
		BatchSize:        BatchSize,
		BatchTimeout:     BatchTimeout,
		PerRowBudget:     PerRowBudget,
		LeaseSlack:       LeaseSlack,
		BirthLeaseWindow: BirthLeaseWindow,
		DeliveryBudget:   DeliveryBudget,
		RetryClaimBatch:  RetryClaimBatch,
	}
}

// ClaimLease is n×PerRowBudget + LeaseSlack under this config.
func (c Config) ClaimLease(n int) time.Duration {
	return time.Duration(n)*c.PerRowBudget + c.LeaseSlack
}

// RetryClaimLease is n×DeliveryBudget + LeaseSlack under this config.
func (c Config) RetryClaimLease(n int) time.Duration {
	return time.Duration(n)*c.DeliveryBudget + c.LeaseSlack
}

// ChainError names the link of the invariant chain that broke.
type ChainError struct {
	Link   string // e.g. "BatchTimeout < ClaimLease(BatchSize)"
	Detail string // the figures that broke it
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("lease invariant broken: %s does not hold (%s)", e.Link, e.Detail)
}

// Validate checks the invariant chain and returns a *ChainError naming the
// first broken link.
//
//	BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease(BatchSize)
//	PerRowBudget < BatchTimeout
//	DeliveryBudget < BirthLeaseWindow
//	RetryClaimBatch×DeliveryBudget < RetryClaimLease(RetryClaimBatch)
func (c Config) Validate() error {
	switch {
	case c.BatchSize < 1:
		return &ChainError{"BatchSize ≥ 1", fmt.Sprintf("BatchSize=%d", c.BatchSize)}
	case c.RetryClaimBatch < 1:
		return &ChainError{"RetryClaimBatch ≥ 1", fmt.Sprintf("RetryClaimBatch=%d", c.RetryClaimBatch)}
	case c.PerRowBudget <= 0 || c.DeliveryBudget <= 0:
		return &ChainError{"budgets > 0", fmt.Sprintf("PerRowBudget=%s DeliveryBudget=%s", c.PerRowBudget, c.DeliveryBudget)}
	}
	if worst := time.Duration(c.BatchSize) * c.PerRowBudget; worst > c.BatchTimeout {
		return &ChainError{"BatchSize×PerRowBudget ≤ BatchTimeout",
			fmt.Sprintf("%d×%s = %s > %s", c.BatchSize, c.PerRowBudget, worst, c.BatchTimeout)}
	}
	if lease := c.ClaimLease(c.BatchSize); c.BatchTimeout >= lease {
		return &ChainError{"BatchTimeout < ClaimLease(BatchSize)",
			fmt.Sprintf("%s ≥ %s", c.BatchTimeout, lease)}
	}
	// A row starts only while a full PerRowBudget remains in its batch, and
	// the claim itself takes a moment: at equality the first row of a batch
	// of one could never start, and every claim would be released unsent.
	if c.PerRowBudget >= c.BatchTimeout {
		return &ChainError{"PerRowBudget < BatchTimeout",
			fmt.Sprintf("%s ≥ %s", c.PerRowBudget, c.BatchTimeout)}
	}
	if c.DeliveryBudget >= c.BirthLeaseWindow {
		return &ChainError{"DeliveryBudget < BirthLeaseWindow",
			fmt.Sprintf("%s ≥ %s", c.DeliveryBudget, c.BirthLeaseWindow)}
	}
	worst := time.Duration(c.RetryClaimBatch) * c.DeliveryBudget
	if lease := c.RetryClaimLease(c.RetryClaimBatch); worst >= lease {
		return &ChainError{"RetryClaimBatch×DeliveryBudget < RetryClaimLease(RetryClaimBatch)",
			fmt.Sprintf("%s ≥ %s", worst, lease)}
	}
	return nil
}

// Environment variables that override the defaults.
const (
	EnvBatchSize        = "EMAIL_BATCH_SIZE"
	EnvBatchTimeout     = "EMAIL_BATCH_TIMEOUT"
	EnvLeaseSlack       = "LEASE_SLACK"
	EnvBirthLeaseWindow = "WEBHOOK_BIRTH_LEASE"
	EnvRetryClaimBatch  = "WEBHOOK_RETRY_BATCH"
)

// Load reads overrides through lookup (os.LookupEnv in production), then
// validates. A value that does not parse is an error naming the variable.
func Load(lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	ints := []struct {
		name string
		dst  *int
	}{{EnvBatchSize, &c.BatchSize}, {EnvRetryClaimBatch, &c.RetryClaimBatch}}
	for _, v := range ints {
		if s, ok := lookup(v.name); ok && s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return c, fmt.Errorf("%s=%q: not an integer", v.name, s)
			}
			*v.dst = n
		}
	}
	durs := []struct {
		name string
		dst  *time.Duration
	}{{EnvBatchTimeout, &c.BatchTimeout}, {EnvLeaseSlack, &c.LeaseSlack}, {EnvBirthLeaseWindow, &c.BirthLeaseWindow}}
	for _, v := range durs {
		if s, ok := lookup(v.name); ok && s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				return c, fmt.Errorf("%s=%q: not a duration (e.g. 300s)", v.name, s)
			}
			*v.dst = d
		}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("lease overrides: %w", err)
	}
	return c, nil
}
