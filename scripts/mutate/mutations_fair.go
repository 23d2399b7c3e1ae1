package main

// Mutations of the fair claim (docs/design/outbox-transport.md, Priorities
// and fair shares), each named with the test that must catch it.
func init() {
	register(
		Mutation{
			Name:    "fair claim: a first-come claim whose read after fails drops its committed rows",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "\tst, err := readSettled(ctx, db, t, edge, n)\n\tif err != nil {\n\t\treturn claimed, true, nil\n",
			Replace: "\tst, err := readSettled(ctx, db, t, edge, n)\n\tif err != nil {\n\t\treturn nil, false, err\n",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_FirstComeRowsKeptWhenTheReadAfterFails",
		},
		Mutation{
			Name:    "webhook fan-out: a lane that knows no key runs the fair fan-out, not the first-come one",
			File:    "webhook/outbox.go",
			Find:    "FirstComeSQL: firstFanOutSQL, ",
			Replace: "",
			Pkg:     "./webhook/",
			Test:    "TestFanOut_NothingKnownClaimsTheFirstDueRows",
		},
		Mutation{
			// Correct, and the fair claim's statements for every message
			// of a steady load: the cost it exists to save.
			Name:    "fair claim: a claim knowing no customer is a fair one, not the first-come claim",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "if opts.Bucket == nil && f.Known() == 0 {",
			Replace: "if false && opts.Bucket == nil && f.Known() == 0 {",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_NothingKnownTakesTheFirstDueRows",
		},
		Mutation{
			Name:    "fair claim: the first-come claim while customers are known (FIFO)",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "if opts.Bucket == nil && f.Known() == 0 {",
			Replace: "if opts.Bucket == nil {",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_NextClaimTakesAnotherCustomersRow|TestFair_NothingKnownTakesTheFirstDueRows",
		},
		Mutation{
			// The customers of the rows it left stay unknown: the next
			// claim is first-come again, a backlog's rows before others'.
			Name:    "fair claim: a first-come claim that left rows does not settle",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "\tif !left {\n",
			Replace: "\tif _ = left; true {\n",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_NextClaimTakesAnotherCustomersRow|TestFair_NothingKnownTakesTheFirstDueRows",
		},
		Mutation{
			Name:    "fair claim: a first-come claim's rows in the order they came, not the fair claim's",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "\t\tinTurn(claimed, keyOf)\n",
			Replace: "\n",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_NothingKnownTakesTheFirstDueRows",
		},
		Mutation{
			// The arrival edge then passes their rows with no edge of
			// their own in front of them.
			Name:    "fair claim: customers seen in the arrival window are not remembered",
			File:    "internal/engine/claim/fair.go",
			Find:    "for k, due := range arrived {",
			Replace: "for k, due := range map[ShareKey]time.Time{} {",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_ArrivalEdgeStopsAtUnknownCustomers",
		},
		Mutation{
			Name:    "fair claim: rows ranked by priority and due time, not by turns (FIFO within a priority)",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "ORDER BY p, turn, last, due\n\tLIMIT",
			Replace: "ORDER BY p, due\n\tLIMIT",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_NextClaimTakesAnotherCustomersRow",
		},
		Mutation{
			Name:    "fair claim: priority ignored in the ranking",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "ORDER BY p, turn, last, due\n\tLIMIT",
			Replace: "ORDER BY turn, last, due\n\tLIMIT",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_PriorityFirst",
		},
		Mutation{
			Name:    "fair claim: turns not carried across claims",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "ORDER BY p, turn, last, due\n\tLIMIT",
			Replace: "ORDER BY p, turn, due\n\tLIMIT",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_NextClaimTakesAnotherCustomersRow|TestFair_OneRowClaimsTakeTurns",
		},
		Mutation{
			Name:    "fair claim: a customer met through the arrival edge is not remembered",
			File:    "internal/engine/claim/fair.go",
			Find:    "if full && !rewound {",
			Replace: "if false && full && !rewound {",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_OneRowClaimsTakeTurns|TestFair_KeysTakenWhole",
		},
		Mutation{
			Name:    "fair claim: a customer whose every due row was taken is remembered, and read for nothing",
			File:    "internal/engine/claim/fair.go",
			Find:    "if full && !rewound {",
			Replace: "if !rewound {",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_KeysTakenWhole",
		},
		Mutation{
			Name:    "fair claim: the sweep's edge ignores the customers' edges",
			File:    "internal/engine/claim/fair.go",
			Find:    "if k.edge.Before(low) {",
			Replace: "if false && k.edge.Before(low) {",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_SweepLeavesKnownBacklogsAlone",
		},
		Mutation{
			Name:    "fair claim: a customer's edge stops at the start of its due time, not at the row",
			File:    "internal/engine/claim/fair.go",
			Find:    "e.edge, e.id = *next[i].Due, *next[i].ID",
			Replace: "e.edge, e.id = *next[i].Due, \"\"",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_KnownBacklogIsNotWalkedAgain",
		},
		Mutation{
			Name:    "fair claim: a served customer is forgotten with rows left",
			File:    "internal/engine/claim/fair.go",
			Find:    "case next[i].Due == nil:",
			Replace: "case true:",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_SweepLeavesKnownBacklogsAlone",
		},
		Mutation{
			Name:    "fair claim: the arrival edge passes customers it does not know",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "if st.arrivalNext != nil {",
			Replace: "if false && st.arrivalNext != nil {",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_ArrivalEdgeStopsAtUnknownCustomers",
		},
		Mutation{
			Name:    "fair claim: a customer's rows planned by the statistics alone",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "const FairPlanSQL = IndexOnlySQL + `, set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true),",
			Replace: "const FairPlanSQL = IndexOnlySQL + `, set_config('enable_sort', 'on', true), set_config('enable_incremental_sort', 'on', true),",
			Pkg:     "./outbox/",
			Test:    "TestFairClaim_ReadsItsIndexes",
		},
		Mutation{
			Name:    "fair claim: the rows come back in no order",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "return fmt.Sprintf(`SELECT %s FROM claimed ORDER BY claim_rank`, t.Returning)",
			Replace: "return fmt.Sprintf(`SELECT %s FROM claimed`, t.Returning)",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_RowsComeInClaimOrder",
		},
		Mutation{
			Name:    "email claim: batches dealt as runs of the claim, not like cards",
			File:    "outbox/claim.go",
			Find:    "for i := b; i < len(claimed); i += k {",
			Replace: "for i := b * len(claimed) / k; i < (b+1)*len(claimed)/k; i++ {",
			Pkg:     "./outbox/",
			Test:    "TestDeal",
		},
		Mutation{
			Name:    "email waiting: rows not yet due counted by priority",
			File:    "outbox/waiting.go",
			Find:    "FROM email_outbox WHERE status = 'pending' AND next_attempt_at <= now()\nGROUP BY priority",
			Replace: "FROM email_outbox WHERE status = 'pending' AND next_attempt_at IS NOT NULL\nGROUP BY priority",
			Pkg:     "./outbox/",
			Test:    "TestReadWaiting",
		},
	)
}

func init() {
	register(Mutation{
		Name:    "fair claim: each claim planned for its values (plan_cache_mode left to choose)",
		File:    "internal/engine/claim/fairclaim.go",
		Find:    "set_config('plan_cache_mode', 'force_generic_plan', true)",
		Replace: "set_config('plan_cache_mode', 'auto', true)",
		Pkg:     "./internal/engine/claim/",
		Test:    "TestFair_PlannedOnce",
	})
}

func init() {
	register(Mutation{
		Name:    "fair claim: a key's rows also bounded by an equality on the key (the scan starts at its first entry)",
		File:    "internal/engine/claim/fairclaim.go",
		Find:    `return fmt.Sprintf("(%s) >= (%s) AND (%s) <= (%s) AND %s <= now()", row, edge, upto, end, col), row`,
		Replace: `return fmt.Sprintf("%s = k.c AND (%s) >= (%s) AND (%s) <= (%s) AND %s <= now()", key, row, edge, upto, end, col), row`,
		Pkg:     "./internal/engine/claim/",
		Test:    "TestFair_KnownBacklogIsNotWalkedAgain",
	})
}

func init() {
	register(Mutation{
		Name:    "claim statements: the memo ignores the fair claim's columns (two tables of a name share statements)",
		File:    "internal/engine/claim/memo.go",
		Find:    "k.table.Fair, k.share, k.fair = nil, *t.Fair, true",
		Replace: "k.table.Fair, k.fair = nil, true",
		Pkg:     "./internal/engine/claim/",
		Test:    "TestMemoized_OnePerTableAndStatement",
	})
}
