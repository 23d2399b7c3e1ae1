package main

// Mutations of what the schema refuses from plain SQL, and what the
// readers survive of rows from before it did: finite due times (migration
// 00026) and the gauges, worker stats and worker show over a row that is
// not.
func init() {
	const finiteDue = "migrations/sql/00026_finite_due.sql"
	register(
		Mutation{
			Name:    "finite due: the gauges subtract a due time of -infinity (one row fails every scrape)",
			File:    "internal/claim/claim.go",
			Find:    "min(COALESCE(CASE WHEN isfinite(%[1]s) THEN %[1]s END, created_at))",
			Replace: "min(COALESCE(%[1]s, created_at))",
			Pkg:     "./internal/backlog/",
			Test:    "TestReadFigures_NonFiniteDueBlindsNoGauge",
		},
		Mutation{
			Name:    "finite due: worker show scans an infinite due time into a time.Time",
			File:    "internal/claim/finite.go",
			Find:    "CASE WHEN isfinite(%[1]s) OR %[1]s IS NULL THEN %[1]s",
			Replace: "CASE WHEN true THEN %[1]s",
			Pkg:     "./internal/story/",
			Test:    "TestFind_NonFiniteDueTimes",
		},
		Mutation{
			Name:    "finite due: email_outbox admits a due time of infinity",
			File:    finiteDue,
			Find:    "CHECK (isfinite(next_attempt_at)) NOT VALID;\nSELECT postbox_finite_due('email_outbox'",
			Replace: "CHECK (next_attempt_at IS NOT NULL) NOT VALID;\nSELECT postbox_finite_due('email_outbox'",
			Pkg:     "./migrations/",
			Test:    "TestCheckConstraints_RefuseAndAccept",
		},
		Mutation{
			Name:    "finite due: webhook_deliveries admits a due time of infinity",
			File:    finiteDue,
			Find:    "CHECK (isfinite(next_retry_at)) NOT VALID;",
			Replace: "CHECK (next_retry_at IS NOT NULL OR true) NOT VALID;",
			Pkg:     "./migrations/",
			Test:    "TestCheckConstraints_RefuseAndAccept",
		},
		Mutation{
			Name:    "finite due: 00026 makes a pending row that is never due due now, instead of failing it for an operator",
			File:    finiteDue,
			Find:    "status = CASE WHEN status = 'pending' AND %2$I = 'infinity' THEN 'failed' ELSE status END,",
			Replace: "status = status,",
			Pkg:     "./migrations/",
			Test:    "TestFiniteDueUpAndDownWithRows",
		},
	)
}
