package main

// Mutations of the claim builder: every claim builds its SET list with
// claim.Set (internal/engine/claim/set.go), the one place attempts goes up
// (docs/design/outbox-transport.md, Claim and lease). A claim that spells
// the increment itself behaves the same today, and is the next claim to
// drift from the rule, so only docs/claimbuilder_test.go sees it.
func init() {
	register(
		Mutation{
			Name:    "claim builder: the admission claim counts its attempt itself",
			File:    "webhook/throttle.go",
			Find:    `claim.Set("d", "lease.until", "next_retry_at", "leased_until")`,
			Replace: `"attempts = d.attempts + 1, next_retry_at = lease.until, leased_until = lease.until"`,
			Pkg:     "./docs/",
			Test:    "TestClaimBuilder_OnePlaceRaisesAttempts",
		},
	)
}
