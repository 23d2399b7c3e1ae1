package main

// Mutations of the claim window (issue 21): claims that start at the
// window's edge instead of the claim index's start, the sweep that moves
// what committed behind the edge into the window, the webhook retry
// claim's holds, and the claim indexes' predicate that keeps every
// row-by-id statement on the primary key.
func init() {
	register(
		Mutation{
			// Today's claim shape: every claim from the start of the index.
			Name:    "claim window: every claim from the start of the index",
			File:    "internal/claim/claim.go",
			Find:    "b.Queue(t.ClaimSQL(), n, lease, edge)",
			Replace: "b.Queue(t.ClaimSQL(), n, lease, time.Time{})",
			Pkg:     "./internal/claim/",
			Test:    "TestWindow_ClaimReadsPastDeadEntriesUnderHeldSnapshot",
		},
		Mutation{
			Name:    "claim window: the edge passes the rows a claim left due",
			File:    "internal/claim/window.go",
			Find:    "if !next.IsZero() && next.Before(edge) {",
			Replace: "if false && !next.IsZero() && next.Before(edge) {",
			Pkg:     "./internal/claim/",
			Test:    "TestWindow_DrainTakesEveryRowOnce",
		},
		Mutation{
			Name:    "claim window: the edge passes rows a sibling held locked",
			File:    "internal/claim/window.go",
			Find:    "if !next.IsZero() && next.Before(edge) {",
			Replace: "if false && !next.IsZero() && next.Before(edge) {",
			Pkg:     "./webhook/",
			Test:    "TestOutbox_ProcessBatch_SkipsRowsLockedBySibling",
		},
		Mutation{
			Name:    "claim window: no margin behind now",
			File:    "internal/claim/window.go",
			Find:    "edge := now.Add(-margin)",
			Replace: "edge := now",
			Pkg:     "./internal/claim/",
			Test:    "TestWindow_Advance",
		},
		Mutation{
			Name:    "claim window: the edge moves back",
			File:    "internal/claim/window.go",
			Find:    "if edge.After(w.low) {",
			Replace: "if true {",
			Pkg:     "./internal/claim/",
			Test:    "TestWindow_Advance",
		},
		Mutation{
			Name:    "claim: planned once, it may scan a new table sequentially",
			File:    "internal/claim/claim.go",
			Find:    "const IndexOnlySQL = `SET LOCAL enable_seqscan = off`",
			Replace: "const IndexOnlySQL = `SET LOCAL enable_seqscan = on`",
			Pkg:     "./internal/claim/",
			Test:    "TestClaim_ReadsByIndexWhateverThePlanCache",
		},
		Mutation{
			Name:    "sweep: moves nothing",
			File:    "internal/claim/sweep.go",
			Find:    "UPDATE %[1]s SET %[2]s = now()\nWHERE id = ANY (ARRAY(SELECT id FROM picked))",
			Replace: "UPDATE %[1]s SET %[2]s = %[2]s\nWHERE id = ANY (ARRAY(SELECT id FROM picked)) AND false",
			Pkg:     "./internal/claim/",
			Test:    "TestSweep_MovesALateCommitIntoTheWindow",
		},
		Mutation{
			Name:    "sweep: the lane never sweeps",
			File:    "internal/engine/lane.go",
			Find:    "\tn, first, err := s.Sweep(ctx)",
			Replace: "\tvar n int\n\tvar first []string\n\tvar err error",
			Pkg:     "./outbox/",
			Test:    "TestRun_LateCommitIsSentAfterTheSweep",
		},
		Mutation{
			Name:    "sweep: takes leased rows too",
			File:    "internal/claim/sweep.go",
			Find:    "%[2]s >= $1::timestamptz AND %[2]s < $2::timestamptz%[3]s",
			Replace: "%[2]s >= $1::timestamptz AND %[2]s < $2::timestamptz + interval '1 day'%[3]s",
			Pkg:     "./internal/claim/",
			Test:    "TestSweep_LeavesLeasesAndBackOffsAlone",
		},
		Mutation{
			Name:    "sweep: legacy NULL deliveries are never moved into the window",
			File:    "internal/claim/sweep.go",
			Find:    "\tif t.LegacyNullDue {\n\t\tfor {",
			Replace: "\tif false {\n\t\tfor {",
			Pkg:     "./webhook/",
			Test:    "TestRetry_ClaimsLegacyNullNextRetryAt",
		},
		Mutation{
			Name:    "retry claim: the edge passes the deliveries admission held",
			File:    "webhook/throttle.go",
			Find:    "return func() { p.retryWindow.Advance(now, next) }, nil",
			Replace: "_ = next\n\treturn func() { p.retryWindow.Advance(now, time.Time{}) }, nil",
			Pkg:     "./webhook/",
			Test:    "TestMaxInFlight_HeldDeliveriesStayInTheWindow",
		},
		Mutation{
			Name:    "retry claim: a disabled endpoint's deliveries hold the window and are swept",
			File:    "webhook/retry.go",
			Find:    "ep.id = webhook_deliveries.endpoint_id AND ep.enabled)",
			Replace: "ep.id = webhook_deliveries.endpoint_id)",
			Pkg:     "./webhook/",
			Test:    "TestRetry_DisabledEndpointLeavesTheWindowAlone",
		},
		Mutation{
			// The index as it was: a mark's WHERE id = $1 AND status =
			// 'pending' implies its predicate again.
			Name:    "claim index: predicate status = 'pending' alone (email)",
			File:    "migrations/sql/00010_claim_window.sql",
			Find:    "CREATE INDEX CONCURRENTLY email_outbox_claim_idx_v10 ON email_outbox (next_attempt_at)\n    WHERE status = 'pending' AND next_attempt_at IS NOT NULL;",
			Replace: "CREATE INDEX CONCURRENTLY email_outbox_claim_idx_v10 ON email_outbox (next_attempt_at)\n    WHERE status = 'pending';",
			Pkg:     "./outbox/",
			Test:    "TestRowStatements_ReadThePrimaryKeyWhateverTheStatistics",
		},
		Mutation{
			Name:    "claim index: predicate status = 'pending' alone (deliveries)",
			File:    "migrations/sql/00010_claim_window.sql",
			Find:    "CREATE INDEX CONCURRENTLY webhook_deliveries_claim_idx_v10 ON webhook_deliveries (next_retry_at)\n    WHERE status = 'pending' AND next_retry_at IS NOT NULL;",
			Replace: "CREATE INDEX CONCURRENTLY webhook_deliveries_claim_idx_v10 ON webhook_deliveries (next_retry_at)\n    WHERE status = 'pending';",
			Pkg:     "./webhook/",
			Test:    "TestRowStatements_ReadThePrimaryKeyWhateverTheStatistics",
		},
		Mutation{
			Name:    "figures: pending rows counted without the claim index's predicate",
			File:    "internal/claim/claim.go",
			Find:    `p := fmt.Sprintf("status = 'pending' AND %s IS NOT NULL", t.DueColumn)`,
			Replace: `p := fmt.Sprintf("status = 'pending' AND %s::text IS NOT NULL", t.DueColumn)`,
			Pkg:     "./internal/backlog/",
			Test:    "TestReadFigures_ReadThePartialIndexes",
		},
		Mutation{
			Name:    "row ids: Enqueue's are random (version 4) again",
			File:    "outbox/enqueue.go",
			Find:    "b[6] = b[6]&0x0f | 0x70",
			Replace: "b[6] = b[6]&0x0f | 0x40",
			Pkg:     "./outbox/",
			Test:    "TestRowIDs_StartWithTheirTime",
		},
		Mutation{
			Name:    "row ids: plain SQL's are random again",
			File:    "migrations/sql/00011_insert_locality.sql",
			Find:    "ALTER TABLE email_outbox ALTER COLUMN id SET DEFAULT postbox_uuidv7();",
			Replace: "ALTER TABLE email_outbox ALTER COLUMN id SET DEFAULT gen_random_uuid();",
			Pkg:     "./outbox/",
			Test:    "TestRowIDs_StartWithTheirTime",
		},
		Mutation{
			Name:    "fillfactor: email rows' new versions leave their page",
			File:    "migrations/sql/00011_insert_locality.sql",
			Find:    "ALTER TABLE email_outbox SET (fillfactor = 80);",
			Replace: "ALTER TABLE email_outbox SET (fillfactor = 100);",
			Pkg:     "./outbox/",
			Test:    "TestRowVersions_StayOnTheirPage",
		},
		Mutation{
			Name:    "failed index: predicate status = 'failed' alone (email requeue)",
			File:    "migrations/sql/00010_claim_window.sql",
			Find:    "CREATE INDEX CONCURRENTLY email_outbox_failed_idx_v10 ON email_outbox (created_at DESC)\n    WHERE status = 'failed' AND created_at IS NOT NULL;",
			Replace: "CREATE INDEX CONCURRENTLY email_outbox_failed_idx_v10 ON email_outbox (created_at DESC)\n    WHERE status = 'failed';",
			Pkg:     "./outbox/",
			Test:    "TestRowStatements_ReadThePrimaryKeyWhateverTheStatistics",
		},
	)
}
