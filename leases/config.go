package leases

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Sane ranges for every lease figure. They keep each setting meaningful
// and keep every product in the chain far from int64 overflow: the largest
// is MaxBatch × MaxDuration = 1000 × 24 h ≈ 8.6e16 ns, a hundredth of
// math.MaxInt64. The chain is computed with saturating arithmetic anyway,
// so a Config built in Go that skips Validate still cannot wrap a lease.
const (
	MinBatch       = 1
	MaxBatch       = 1000
	MinTimeout     = time.Second
	MaxDuration    = 24 * time.Hour
	MinLeaseSlack  = time.Duration(0)
	MinBudgetValue = time.Nanosecond
)

// RangeError names a lease setting outside its sane range. Name is the
// environment variable when the value came from one (Load), else the
// Config field.
type RangeError struct {
	Name     string
	Value    string
	Min, Max string
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("%s=%s is out of range: must be in %s..%s", e.Name, e.Value, e.Min, e.Max)
}

type intRange struct{ min, max int }
type durRange struct{ min, max time.Duration }

func (r intRange) check(name string, v int) error {
	if v < r.min || v > r.max {
		return &RangeError{name, strconv.Itoa(v), strconv.Itoa(r.min), strconv.Itoa(r.max)}
	}
	return nil
}

func (r durRange) check(name string, v time.Duration) error {
	if v < r.min || v > r.max {
		return &RangeError{name, v.String(), r.min.String(), r.max.String()}
	}
	return nil
}

var (
	batchRange   = intRange{MinBatch, MaxBatch}
	timeoutRange = durRange{MinTimeout, MaxDuration}
	slackRange   = durRange{MinLeaseSlack, MaxDuration}
	budgetRange  = durRange{MinBudgetValue, MaxDuration}
)

// mulDur is n×d, saturating at the int64 bounds instead of wrapping.
func mulDur(n int, d time.Duration) time.Duration {
	if n == 0 || d == 0 {
		return 0
	}
	p := time.Duration(n) * d
	if p/d != time.Duration(n) || (n == -1 && d == math.MinInt64) || (d == -1 && n == math.MinInt64) {
		if (n < 0) != (d < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return p
}

// addDur is a+b, saturating at the int64 bounds instead of wrapping.
func addDur(a, b time.Duration) time.Duration {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

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

// Default returns the shipped figures (see docs/design/outbox-transport.md,
// Derived constants).
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
// It saturates instead of wrapping.
func (c Config) ClaimLease(n int) time.Duration {
	return addDur(mulDur(n, c.PerRowBudget), c.LeaseSlack)
}

// RetryClaimLease is n×DeliveryBudget + LeaseSlack under this config.
// It saturates instead of wrapping.
func (c Config) RetryClaimLease(n int) time.Duration {
	return addDur(mulDur(n, c.DeliveryBudget), c.LeaseSlack)
}

// ChainError names the link of the invariant chain that broke.
type ChainError struct {
	Link   string // e.g. "BatchTimeout < ClaimLease(BatchSize)"
	Detail string // the figures that broke it
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("lease invariant broken: %s does not hold (%s)", e.Link, e.Detail)
}

// Validate checks every figure against its sane range (a *RangeError naming
// the field), then the invariant chain, computed without overflow, and
// returns a *ChainError naming the first broken link.
//
//	BatchSize×PerRowBudget ≤ BatchTimeout < ClaimLease(BatchSize)
//	PerRowBudget < BatchTimeout
//	DeliveryBudget < BirthLeaseWindow
//	RetryClaimBatch×DeliveryBudget < RetryClaimLease(RetryClaimBatch)
//
// The webhook transport checks ValidateAttempts besides.
func (c Config) Validate() error {
	switch {
	case c.BatchSize < 1:
		return &ChainError{"BatchSize ≥ 1", fmt.Sprintf("BatchSize=%d", c.BatchSize)}
	case c.RetryClaimBatch < 1:
		return &ChainError{"RetryClaimBatch ≥ 1", fmt.Sprintf("RetryClaimBatch=%d", c.RetryClaimBatch)}
	case c.PerRowBudget <= 0 || c.DeliveryBudget <= 0:
		return &ChainError{"budgets > 0", fmt.Sprintf("PerRowBudget=%s DeliveryBudget=%s", c.PerRowBudget, c.DeliveryBudget)}
	}
	for _, err := range []error{
		batchRange.check("BatchSize", c.BatchSize),
		batchRange.check("RetryClaimBatch", c.RetryClaimBatch),
		timeoutRange.check("BatchTimeout", c.BatchTimeout),
		budgetRange.check("PerRowBudget", c.PerRowBudget),
		slackRange.check("LeaseSlack", c.LeaseSlack),
		timeoutRange.check("BirthLeaseWindow", c.BirthLeaseWindow),
		budgetRange.check("DeliveryBudget", c.DeliveryBudget),
	} {
		if err != nil {
			return err
		}
	}
	if worst := mulDur(c.BatchSize, c.PerRowBudget); worst > c.BatchTimeout {
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
	worst := mulDur(c.RetryClaimBatch, c.DeliveryBudget)
	if lease := c.RetryClaimLease(c.RetryClaimBatch); worst >= lease {
		return &ChainError{"RetryClaimBatch×DeliveryBudget < RetryClaimLease(RetryClaimBatch)",
			fmt.Sprintf("%s ≥ %s", worst, lease)}
	}
	return nil
}

// ValidateAttempts checks, after Validate, what a webhook attempt needs:
// it starts only while a whole DeliveryBudget and its mark still fit in
// its lease, so a birth lease, or a retry lease of one delivery
// (DeliveryBudget + LeaseSlack), that cannot hold both would have every
// delivery claimed and released unstarted, claim after claim.
//
//	DeliveryBudget + MarkTimeout < BirthLeaseWindow
//	MarkTimeout < LeaseSlack
//
// The email transport does not need it: its PerRowBudget counts the mark.
func (c Config) ValidateAttempts() error {
	if need := c.DeliveryBudget + MarkTimeout; need >= c.BirthLeaseWindow {
		return &ChainError{"DeliveryBudget + MarkTimeout < BirthLeaseWindow",
			fmt.Sprintf("%s + %s ≥ %s (%s)", c.DeliveryBudget, MarkTimeout, c.BirthLeaseWindow, EnvBirthLeaseWindow)}
	}
	if c.LeaseSlack <= MarkTimeout {
		return &ChainError{"MarkTimeout < LeaseSlack",
			fmt.Sprintf("%s ≥ %s (%s)", MarkTimeout, c.LeaseSlack, EnvLeaseSlack)}
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
// validates. A value that does not parse, or lies outside its range, is an
// error naming the variable (and the range).
func Load(lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	ints := []struct {
		name string
		dst  *int
		r    intRange
	}{{EnvBatchSize, &c.BatchSize, batchRange}, {EnvRetryClaimBatch, &c.RetryClaimBatch, batchRange}}
	for _, v := range ints {
		if s, ok := lookup(v.name); ok && s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return c, fmt.Errorf("%s=%q: not an integer (range %d..%d)", v.name, s, v.r.min, v.r.max)
			}
			if err := v.r.check(v.name, n); err != nil {
				return c, err
			}
			*v.dst = n
		}
	}
	durs := []struct {
		name string
		dst  *time.Duration
		r    durRange
	}{{EnvBatchTimeout, &c.BatchTimeout, timeoutRange}, {EnvLeaseSlack, &c.LeaseSlack, slackRange}, {EnvBirthLeaseWindow, &c.BirthLeaseWindow, timeoutRange}}
	for _, v := range durs {
		if s, ok := lookup(v.name); ok && s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				return c, fmt.Errorf("%s=%q: not a duration (e.g. 300s)", v.name, s)
			}
			if err := v.r.check(v.name, d); err != nil {
				return c, err
			}
			*v.dst = d
		}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("lease overrides: %w", err)
	}
	return c, nil
}
