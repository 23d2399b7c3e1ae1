package main

func init() {
	register(Mutation{
		Name:    "leases: BatchTimeout raised to ClaimLease(BatchSize)",
		File:    "leases/leases.go",
		Find:    "BatchTimeout = 300 * time.Second",
		Replace: "BatchTimeout = 360 * time.Second",
		Pkg:     "./leases/",
		Test:    "TestLeaseInvariantChain",
	}, Mutation{
		Name:    "leases: a retry lease without room for its mark",
		File:    "leases/config.go",
		Find:    "if c.LeaseSlack <= MarkTimeout {",
		Replace: "if c.LeaseSlack < 0 {",
		Pkg:     "./leases/",
		Test:    "TestValidateAttemptsNamesBrokenLink",
	})
}
