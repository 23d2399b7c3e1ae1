package main

func init() {
	register(Mutation{
		Name:    "leases: BatchTimeout raised to ClaimLease(BatchSize)",
		File:    "leases/leases.go",
		Find:    "BatchTimeout = 300 * time.Second",
		Replace: "BatchTimeout = 360 * time.Second",
		Pkg:     "./leases/",
		Test:    "TestLeaseInvariantChain",
	})
}
