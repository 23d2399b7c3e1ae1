package leases_test

import (
	"errors"
	"fmt"

	"github.com/postbox/postbox/leases"
)

// Load applies the environment's overrides to the shipped defaults and
// validates the result: the claim lease is derived from the batch size and
// the per-row budget, and an override either yields a chain that holds or
// an error naming the link it would break.
func ExampleLoad() {
	env := map[string]string{ // in production: os.LookupEnv
		leases.EnvBatchSize:    "3",
		leases.EnvBatchTimeout: "200s",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := leases.Load(lookup)
	if err != nil {
		panic(err)
	}
	fmt.Println("batch size:", cfg.BatchSize)
	fmt.Println("per-row budget:", cfg.PerRowBudget)
	fmt.Println("batch timeout:", cfg.BatchTimeout)
	fmt.Println("claim lease of a batch:", cfg.ClaimLease(cfg.BatchSize))

	// The smaller batch without the shorter timeout: a batch could still
	// be running when its rows' lease lets a sibling claim them again.
	delete(env, leases.EnvBatchTimeout)
	_, err = leases.Load(lookup)
	var chain *leases.ChainError
	if errors.As(err, &chain) {
		fmt.Println("refused:", chain.Link)
	}
	fmt.Println(err)

	// A figure outside its sane range names the variable.
	env[leases.EnvBatchSize] = "5000"
	_, err = leases.Load(lookup)
	fmt.Println(err)
	// Output:
	// batch size: 3
	// per-row budget: 1m0s
	// batch timeout: 3m20s
	// claim lease of a batch: 4m0s
	// refused: BatchTimeout < ClaimLease(BatchSize)
	// lease overrides: lease invariant broken: BatchTimeout < ClaimLease(BatchSize) does not hold (5m0s ≥ 4m0s)
	// EMAIL_BATCH_SIZE=5000 is out of range: must be in 1..1000
}

// Validate checks a Config built in Go, as a test or a tool might build
// one, against the same chain.
func ExampleConfig_Validate() {
	cfg := leases.Default()
	fmt.Println("defaults:", cfg.Validate())

	cfg.BatchSize = 1
	cfg.PerRowBudget = cfg.BatchTimeout // no time left to claim: the row could never start
	err := cfg.Validate()
	var chain *leases.ChainError
	fmt.Println(errors.As(err, &chain), chain.Link)
	// Output:
	// defaults: <nil>
	// true PerRowBudget < BatchTimeout
}
