package main

// Mutations of the retry claim's admission and the breaker's bounds that an
// independent mutation pass found no test protecting: the bucket's one-token
// floor, the breaker's maximum cool-down and the bound on its openings,
// outcomes with no request kept out of the breaker, the throttled backlog
// pushed off the claim's head (and how far), and the in-flight cap and the
// probe outranking the bucket. Each names the test in
// webhook/admission_test.go that must turn red.
func init() {
	const (
		throttleGo = "webhook/throttle.go"
		breakerGo  = "webhook/breaker.go"
		configGo   = "webhook/config.go"
		pkg        = "./webhook/"
	)
	register(
		// The bucket's floor: below 2/s half a second's worth is under one
		// token, and a claim admits whole tokens.
		Mutation{
			Name:    "admission: rate limit below 2/s: no one-token floor on the bucket (starved)",
			File:    throttleGo,
			Find:    "burst := math.Max(1, *b.rate*burstSeconds)",
			Replace: "burst := *b.rate * burstSeconds",
			Pkg:     pkg,
			Test:    "TestRateLimit_BelowTwoPerSecondOneTokenFloor",
		},
		Mutation{
			Name:    "admission: rate limit below 2/s: a floor of two tokens (bursts past it)",
			File:    throttleGo,
			Find:    "burst := math.Max(1, *b.rate*burstSeconds)",
			Replace: "burst := math.Max(2, *b.rate*burstSeconds)",
			Pkg:     pkg,
			Test:    "TestRateLimit_BelowTwoPerSecondOneTokenFloor",
		},

		// The breaker's cap and the bound on the openings it doubles by.
		Mutation{
			// $6 stays referenced so the statement still plans.
			Name:    "admission: breaker cool-down doubles past its cap",
			File:    "webhook/mark.go",
			Find:    "least(` + b.cooldown + `::float8 * power(2, t.breaker_opens), ` + b.maxCooldown + `::float8)",
			Replace: "` + b.cooldown + `::float8 * power(2, t.breaker_opens) + 0 * ` + b.maxCooldown + `::float8",
			Pkg:     pkg,
			Test:    "TestBreaker_CooldownStopsAtItsCap",
		},
		Mutation{
			Name:    "admission: the shipped breaker cap is not 1h",
			File:    configGo,
			Find:    "DefaultBreakerMaxCooldown = time.Hour",
			Replace: "DefaultBreakerMaxCooldown = 2 * time.Hour",
			Pkg:     pkg,
			Test:    "TestBreaker_CooldownStopsAtItsCap",
		},
		Mutation{
			Name:    "admission: breaker openings counted without their bound of 30",
			File:    "webhook/mark.go",
			Find:    "least(t.breaker_opens + 1, 30)",
			Replace: "t.breaker_opens + 1",
			Pkg:     pkg,
			Test:    "TestBreaker_CooldownStopsAtItsCap",
		},
		Mutation{
			Name:    "admission: a breaker cap below its first cool-down is accepted from the environment",
			File:    configGo,
			Find:    "if c.BreakerMaxCooldown < c.BreakerCooldown {",
			Replace: "if false && c.BreakerMaxCooldown < c.BreakerCooldown {",
			Pkg:     pkg,
			Test:    "TestBreakerSettings_FromEnv",
		},
		Mutation{
			Name:    "admission: a breaker cap equal to its first cool-down is refused",
			File:    configGo,
			Find:    "if c.BreakerMaxCooldown < c.BreakerCooldown {",
			Replace: "if c.BreakerMaxCooldown <= c.BreakerCooldown {",
			Pkg:     pkg,
			Test:    "TestBreakerSettings_FromEnv",
		},

		// Outcomes with no request are not the receiver's failures.
		Mutation{
			Name:    "admission: an outcome with no request made feeds the breaker",
			File:    "webhook/mark.go",
			Find:    "b.counts && r.Attempt > 0, b.settings",
			Replace: "b.counts, b.settings",
			Pkg:     pkg,
			Test:    "TestBreaker_NoRequestMadeCountsNoFailure",
		},

		// The throttled backlog leaves the claim's head at once.
		Mutation{
			Name:    "admission: rows the bucket held back are not pushed (the backlog stays at the claim's head)",
			File:    throttleGo,
			Find:    "\t\t\tif byRate {\n",
			Replace: "\t\t\tif false && byRate {\n",
			Pkg:     pkg,
			Test:    "TestRateLimit_ThrottledBacklogLeavesTheClaimsHead",
		},
		Mutation{
			Name:    "admission: the push moves one claim's worth, not the endpoint's whole due backlog",
			File:    throttleGo,
			Find:    "\tLIMIT $5\n",
			Replace: "\tLIMIT $5 / 1000\n",
			Pkg:     pkg,
			Test:    "TestRateLimit_ThrottledBacklogLeavesTheClaimsHead",
		},
		Mutation{
			Name:    "admission: a throttled row may be pushed further than a minute",
			File:    throttleGo,
			Find:    "maxThrottlePush = time.Minute",
			Replace: "maxThrottlePush = time.Hour",
			Pkg:     pkg,
			Test:    "TestRateLimit_ThrottledBacklogLeavesTheClaimsHead",
		},

		// The in-flight cap and the probe outrank the bucket.
		Mutation{
			Name:    "admission: rows the in-flight cap holds are pushed as if the bucket held them",
			File:    throttleGo,
			Find:    "if free := max(*b.maxInFlight-b.inFlight, 0); free < n {\n\t\t\tn, byRate = free, false",
			Replace: "if free := max(*b.maxInFlight-b.inFlight, 0); free < n {\n\t\t\tn = free",
			Pkg:     pkg,
			Test:    "TestAdmission_CapAndProbeOutrankTheBucket",
		},
		Mutation{
			Name:    "admission: rows behind the breaker's probe slots are pushed as if the bucket held them",
			File:    throttleGo,
			Find:    "\t\tif free := max(b.probeSlots-b.inFlight, 0); free < n {\n\t\t\tn, byRate = free, false",
			Replace: "\t\tif free := max(b.probeSlots-b.inFlight, 0); free < n {\n\t\t\tn = free",
			Pkg:     pkg,
			Test:    "TestAdmission_CapAndProbeOutrankTheBucket",
		},
	)
}
