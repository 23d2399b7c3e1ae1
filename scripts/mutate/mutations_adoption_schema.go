package main

// Mutations of what the schema refuses from plain SQL, and what the
// readers survive of rows from before it did: finite due times (migration
// 00026) and the gauges, worker stats and worker show over a row that is
// not; a place in an ordering key taken from the sequence only (00027),
// and 00023's down that would drop pending rows' keys.
func init() {
	const (
		finiteDue   = "migrations/sql/00026_finite_due.sql"
		seqGuard    = "migrations/sql/00027_ordering_seq_guard.sql"
		seqGuardRun = "TestOrderingSeqComesFromTheSequenceOnly"
	)
	register(
		Mutation{
			Name:    "ordering: 00023's down drops the keys of pending rows",
			File:    "migrations/sql/00023_webhook_ordering.sql",
			Find:    "IF outbox + deliveries > 0 THEN",
			Replace: "IF false THEN",
			Pkg:     "./migrations/",
			Test:    "TestWebhookOrderingUpAndDownWithRows",
		},
		Mutation{
			Name:    "ordering: plain SQL supplies a row's place in its key",
			File:    seqGuard,
			Find:    "ELSIF NEW.ordering_seq IS DISTINCT FROM",
			Replace: "ELSIF TG_OP = 'UPDATE' AND NEW.ordering_seq IS DISTINCT FROM",
			Pkg:     "./migrations/",
			Test:    seqGuardRun,
		},
		Mutation{
			Name:    "ordering: plain SQL moves a row's place in its key",
			File:    seqGuard,
			Find:    "BEFORE UPDATE OF ordering_seq ON webhook_outbox",
			Replace: "BEFORE UPDATE OF ordering_key ON webhook_outbox",
			Pkg:     "./migrations/",
			Test:    seqGuardRun,
		},
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
