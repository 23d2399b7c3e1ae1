package main

// Mutations of what a webhook claim stores in the endpoint's bucket
// (webhook/throttle.go): its tokens and the time it took them, both, so
// the next claim on any replica reads the bucket as this one left it. The
// matrix's older mutation drops both; this one keeps the time.
func init() {
	register(
		Mutation{
			Name:    "rate limit: the bucket's time is stored but not its tokens",
			File:    "webhook/throttle.go",
			Find:    "rl_tokens = CASE WHEN ep.rate_limit IS NULL THEN ep.rl_tokens ELSE u.tokens END,",
			Replace: "rl_tokens = ep.rl_tokens,",
			Pkg:     "./webhook/",
			Test:    "TestRateLimit_ClaimStoresWhatItTook",
		},
	)
}
