package main

// Mutations of the webhook half of fair shares (docs/design/outbox-transport.md,
// Priorities and fair shares): the fan-out's round-robin over tenants and
// the slot shares, each named with the test that must catch it.
func init() {
	register(
		Mutation{
			// Every row is then everyone's: the fan-out is first come,
			// first served again.
			Name:    "webhook fan-out: one share key for every row (FIFO)",
			File:    "webhook/outbox.go",
			Find:    "Fair: &claim.Share{Key: shareKeySQL}}",
			Replace: "Fair: &claim.Share{Key: \"''::text\"}}",
			Pkg:     "./webhook/",
			Test:    "TestFanOut_TenantsTakeTurns",
		},
		Mutation{
			Name:    "slot shares: no headroom kept for the keys below their share",
			File:    "internal/engine/shares.go",
			Find:    "return max(s.cap/16, 1)",
			Replace: "return 0",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_CrowdedKeyLeavesTheHeadroom",
		},
		Mutation{
			Name:    "slot shares: the slots the keys below their share hold do not count towards the headroom",
			File:    "internal/engine/shares.go",
			Find:    "\t\t\troom -= u.held\n",
			Replace: "\t\t\troom -= 0 * u.held\n",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_CrowdedKeyLeavesTheHeadroom",
		},
		Mutation{
			Name:    "slot shares: a lane with crowded slots waits for its Refill of free slots",
			File:    "internal/engine/lane.go",
			Find:    "if backlog && r.running() > 0 && !l.cfg.Slots.Shared() {",
			Replace: "if backlog && r.running() > 0 {",
			Pkg:     "./internal/engine/",
			Test:    "TestLane_CrowdedSlotsClaimForAnyFreeSlot",
		},
		Mutation{
			Name:    "slot shares: no key is ever crowded",
			File:    "internal/engine/shares.go",
			Find:    "return sharing > 1 && u != nil && u.held*sharing >= s.cap",
			Replace: "return sharing < 0 && u != nil && u.held*sharing >= s.cap",
			Pkg:     "./webhook/",
			Test:    "TestSlots_SlowEndpointLeavesTheHeadroomToOthers",
		},
		Mutation{
			Name:    "slot shares: a key alone counts as sharing with another",
			File:    "internal/engine/shares.go",
			Find:    "n := 0\n\tfor k, u := range s.keys {",
			Replace: "n := 1\n\tfor k, u := range s.keys {",
			Pkg:     "./webhook/",
			Test:    "TestSlots_EndpointAloneUsesEverySlot",
		},
		Mutation{
			Name:    "slot shares: a key stops sharing the moment it holds no slot",
			File:    "internal/engine/shares.go",
			Find:    "if u.held > 0 || now.Sub(u.seen) < recent {",
			Replace: "if u.held > 0 {",
			Pkg:     "./webhook/",
			Test:    "TestSlots_SlowEndpointLeavesTheHeadroomToOthers",
		},
		Mutation{
			Name:    "slot shares: a claim's slot goes to a crowded key's unit, headroom or not",
			File:    "internal/engine/shares.go",
			Find:    "if !s.crowded(key, n) || s.cap-s.used-len(s.ranks) >= s.room(n) {",
			Replace: "if !s.crowded(key, n) || true {",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_CrowdedKeyLeavesTheHeadroom",
		},
		Mutation{
			Name:    "slot shares: a unit waiting for a slot ignores its key's share",
			File:    "internal/engine/shares.go",
			Find:    "if free == 0 || s.crowded(key, n) && free <= s.room(n) {",
			Replace: "if free == 0 || s.crowded(key, n) && false {",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_CrowdedKeyLeavesTheHeadroom",
		},
		Mutation{
			Name:    "slot shares: the lane takes no account of whose slot a unit holds",
			File:    "internal/engine/lane.go",
			Find:    "case keyed && (i >= n || !l.cfg.Slots.Assign(k.SlotKey())):",
			Replace: "case keyed && false && (i >= n || !l.cfg.Slots.Assign(k.SlotKey())):",
			Pkg:     "./webhook/",
			Test:    "TestSlots_SlowEndpointLeavesTheHeadroomToOthers",
		},
		Mutation{
			Name:    "webhook fan-out: a crowded endpoint's tenant is not capped in the claim",
			File:    "webhook/outbox.go",
			Find:    "most := p.crowdedShares(n)\n",
			Replace: "most := map[string]int(nil)\n",
			Pkg:     "./webhook/",
			Test:    "TestSlots_SlowEndpointLeavesTheHeadroomToOthers",
		},
		Mutation{
			Name:    "fair claim: a key's cap (FairOptions.Most) ignored",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "most[i] = max(min(m, n), 0)",
			Replace: "most[i] = n + 0*m",
			Pkg:     "./webhook/",
			Test:    "TestSlots_SlowEndpointLeavesTheHeadroomToOthers",
		},
	)
}

func init() {
	register(
		Mutation{
			Name:    "slot shares: a retry claim of the headroom takes a crowded endpoint's deliveries",
			File:    "webhook/throttle.go",
			Find:    "\tAND d.endpoint_id <> ALL (coalesce($7::uuid[], '{}'))\n",
			Replace: "\tAND $7::uuid[] IS NOT DISTINCT FROM $7::uuid[]\n",
			Pkg:     "./webhook/",
			Test:    "TestSlots_RetryClaimLeavesACrowdedEndpointsDeliveries",
		},
		Mutation{
			Name:    "slot shares: a retry claim leaves crowded endpoints alone beyond the headroom too",
			File:    "webhook/retry.go",
			Find:    "\tif n > headroom {\n\t\treturn nil\n\t}\n\treturn crowded",
			Replace: "\t_ = headroom\n\treturn crowded",
			Pkg:     "./webhook/",
			Test:    "TestSlots_RetryClaimLeavesACrowdedEndpointsDeliveries",
		},
	)
}
