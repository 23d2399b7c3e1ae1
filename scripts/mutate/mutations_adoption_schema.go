package main

// Mutations of what the schema refuses from plain SQL, and what the
// readers survive of rows from before it did: finite due times (migration
// 00026) and the gauges, worker stats and worker show over a row that is
// not; a place in an ordering key taken from the sequence only (00027),
// and 00023's down that would drop pending rows' keys; an email payload's
// shape checked at insert (00028), and the fix offered for a row that
// failed for its payload anyway.
func init() {
	const (
		finiteDue   = "migrations/sql/00026_finite_due.sql"
		seqGuard    = "migrations/sql/00027_ordering_seq_guard.sql"
		seqGuardRun = "TestOrderingSeqComesFromTheSequenceOnly"
		shape       = "migrations/sql/00028_email_payload_shape.sql"
		shapeRun    = "TestPlainSQL_PayloadShapeRefusedByTheTable"
	)
	register(
		Mutation{
			Name:    "payload shape: plain SQL's payload.to may be an array",
			File:    shape,
			Find:    "('to', 'string'), ",
			Replace: "",
			Pkg:     "./outbox/",
			Test:    shapeRun,
		},
		Mutation{
			Name:    "payload shape: a number passes for a text field",
			File:    shape,
			Find:    "WHEN 'number' THEN f.want = 'integer' AND",
			Replace: "WHEN 'number' THEN true OR",
			Pkg:     "./outbox/",
			Test:    shapeRun,
		},
		Mutation{
			Name:    "payload shape: attempt_number may hold a fraction",
			File:    shape,
			Find:    "~ '^-?[0-9]{1,19}$'",
			Replace: "~ '^-?[0-9.]+$'",
			Pkg:     "./outbox/",
			Test:    shapeRun,
		},
		Mutation{
			Name:    "payload shape: a secret key's sealed envelope is refused",
			File:    shape,
			Find:    "WHEN 'object' THEN f.want = 'secret' AND",
			Replace: "WHEN 'object' THEN false AND",
			Pkg:     "./outbox/",
			Test:    shapeRun,
		},
		Mutation{
			Name:    "payload failure: the predicate misses the decoder's errors",
			File:    "outbox/payloadfailure.go",
			Find:    `const payloadErrorPrefix = "decode payload: "`,
			Replace: `const payloadErrorPrefix = "payload: "`,
			Pkg:     "./outbox/",
			Test:    "TestDispatch_DecodeErrorFailsAtOnce",
		},
		Mutation{
			Name:    "payload failure: worker show offers a requeue to a row failed for its payload",
			File:    "internal/operator/story/story.go",
			Find:    "if outbox.FailedForPayload(e.LastError) {",
			Replace: "if false {",
			Pkg:     "./internal/operator/story/",
			Test:    "TestFind_FailedForItsPayloadFixIsACorrectedRow",
		},
		Mutation{
			Name:    "payload failure: the console offers a requeue of a row failed for its payload",
			File:    "internal/operator/story/story.go",
			Find:    "Requeueable: r.Status == outbox.StatusFailed && !outbox.FailedForPayload(r.LastError),",
			Replace: "Requeueable: r.Status == outbox.StatusFailed,",
			Pkg:     "./internal/operator/story/",
			Test:    "TestFind_FailedForItsPayloadFixIsACorrectedRow",
		},
		Mutation{
			Name:    "payload failure: worker failed email offers a requeue to a row failed for its payload",
			File:    "cmd/worker/failed.go",
			Find:    `if f.Table == "email_outbox" && outbox.FailedForPayload(f.Error) {`,
			Replace: "if false {",
			Pkg:     "./cmd/worker/",
			Test:    "TestFailedEmailForItsPayloadSuggestsACorrectedRow",
		},
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
			File:    "internal/engine/claim/claim.go",
			Find:    "min(COALESCE(CASE WHEN isfinite(%[1]s) THEN %[1]s END, created_at))",
			Replace: "min(COALESCE(%[1]s, created_at))",
			Pkg:     "./internal/operator/backlog/",
			Test:    "TestReadFigures_NonFiniteDueBlindsNoGauge",
		},
		Mutation{
			Name:    "finite due: worker show scans an infinite due time into a time.Time",
			File:    "internal/engine/claim/finite.go",
			Find:    "CASE WHEN isfinite(%[1]s) OR %[1]s IS NULL THEN %[1]s",
			Replace: "CASE WHEN true THEN %[1]s",
			Pkg:     "./internal/operator/story/",
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
