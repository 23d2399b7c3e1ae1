package main

// Mutations of the email outbox (docs/design/outbox-transport.md: the claim
// and lease, the derived constants, detached marks, redelivery semantics and
// the scrub of secret keys), each named with the outbox test that must catch
// it. The claim mutations edit the shared internal/engine/claim code; the webhook
// side registers its own entries naming webhook tests.
func init() {
	register(
		Mutation{
			// The email claim is the fair claim: its rows of customers
			// not known yet are read from the arrival edge.
			Name:    "outbox claim: drop FOR UPDATE SKIP LOCKED",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "\t\t\tFOR UPDATE SKIP LOCKED) a",
			Replace: "\t\t\t) a",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_SkipsRowsLockedBySibling",
		},
		Mutation{
			Name:    "outbox claim: FOR UPDATE without SKIP LOCKED",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "\t\t\tFOR UPDATE SKIP LOCKED) a",
			Replace: "\t\t\tFOR UPDATE) a",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_SkipsRowsLockedBySibling",
		},
		Mutation{
			Name:    "fair claim: a known customer's rows read without FOR UPDATE SKIP LOCKED",
			File:    "internal/engine/claim/fairclaim.go",
			Find:    "FOR UPDATE SKIP LOCKED) h",
			Replace: ") h",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestFair_RoundRobinAcrossConcurrentClaimers",
		},
		Mutation{
			// The parameter stays referenced so the statement still runs:
			// only the lease is gone.
			Name:    "outbox claim: drop the lease stamp",
			File:    "internal/engine/claim/claim.go",
			Find:    `return Set("", "now() + $2::interval", t.DueColumn)`,
			Replace: `return Set("", t.DueColumn+" + 0 * $2::interval", t.DueColumn)`,
			Pkg:     "./outbox/",
			Test:    "TestClaim_ConcurrentClaimersDisjoint",
		},
		Mutation{
			Name:    "outbox mark: drop the status = 'pending' guard",
			File:    "outbox/mark.go",
			Find:    "const casGuard = `WHERE id = $1 AND status = 'pending'`",
			Replace: "const casGuard = `WHERE id = $1`",
			Pkg:     "./outbox/",
			Test:    "TestMark_StaleFailureAfterSiblingSuccessDropped",
		},
		Mutation{
			Name:    "outbox mark: the dispatcher's marks run on the batch context",
			File:    "internal/engine/claim/claim.go",
			Find:    "mctx, cancel := MarkContext(ctx)",
			Replace: "mctx, cancel := context.WithCancel(ctx)",
			Pkg:     "./outbox/",
			Test:    "TestMark_SurvivesBatchContextDeath",
		},
		Mutation{
			Name:    "outbox mark: the exported marks run on the caller's context",
			File:    "internal/engine/claim/claim.go",
			Find:    "mctx, cancel := MarkContext(ctx)",
			Replace: "mctx, cancel := context.WithCancel(ctx)",
			Pkg:     "./outbox/",
			Test:    "TestMarkFuncs_SurviveCallerContextDeath",
		},
		Mutation{
			Name:    "outbox mark groups: a rejected statement fails the whole group",
			File:    "internal/engine/claim/group.go",
			Find:    "\tif errors.As(cause, &pgErr) {\n\t\treturn false\n\t}",
			Replace: "\t_ = pgErr",
			Pkg:     "./outbox/",
			Test:    "TestMarkGroups_RejectedStatementLosesNoOtherMark",
		},
		Mutation{
			Name:    "outbox mark groups: one mark per commit",
			File:    "internal/engine/claim/group.go",
			Find:    "maxGroup: 64}",
			Replace: "maxGroup: 1}",
			Pkg:     "./outbox/",
			Test:    "TestMarkGroups_ConcurrentMarksAreGrouped",
		},
		Mutation{
			Name:    "outbox claim: a multi-batch claim leases rows for the whole claim",
			File:    "outbox/claim.go",
			Find:    "d.leases.ClaimLease(size))",
			Replace: "d.leases.ClaimLease(n*size))",
			Pkg:     "./outbox/",
			Test:    "TestDrain_OneClaimForSeveralBatchesLeasesEachRowForOneBatch",
		},
		Mutation{
			Name:    "outbox drain: one claim per batch",
			File:    "internal/engine/lane.go",
			Find:    "n := l.cfg.Slots.Acquire(claimCtx, least, l.cfg.Slots.Cap())",
			Replace: "n := l.cfg.Slots.Acquire(claimCtx, least, 1)",
			Pkg:     "./outbox/",
			Test:    "TestDrain_OneClaimForSeveralBatchesLeasesEachRowForOneBatch",
		},
		Mutation{
			Name:    "migrations: email payloads stay pglz",
			File:    "migrations/sql/00004_payload_lz4.sql",
			Find:    "        ALTER TABLE email_outbox ALTER COLUMN payload SET COMPRESSION lz4;\n",
			Replace: "",
			Pkg:     "./migrations/",
			Test:    "TestPayloadsUseLZ4WhereAvailable",
		},
		Mutation{
			Name:    "last_error stored as the relay sent it",
			File:    "internal/engine/pgtext/pgtext.go",
			Find:    "s, cut := Clean(s, MaxLastError)",
			Replace: "cut := false",
			Pkg:     "./outbox/",
			Test:    "TestMark_ReplyWithNULAndInvalidUTF8IsRecorded",
		},
		Mutation{
			Name:    "outbox scrub: dropped from the dispatched and skipped marks",
			File:    "outbox/scrub.go",
			Find:    `THEN payload - " + scrubbedKeysSQL + " ELSE payload END, "`,
			Replace: `THEN payload ELSE payload END, "`,
			Pkg:     "./outbox/",
			Test:    "TestScrub_SentAndSkippedRowsLoseExactlyTheSixKeys",
		},
		Mutation{
			Name:    "outbox mark: retry mark increments attempts",
			File:    "outbox/mark.go",
			Find:    "SET next_attempt_at = now() + $2::interval, last_error = $3",
			Replace: "SET attempts = attempts + 1, next_attempt_at = now() + $2::interval, last_error = $3",
			Pkg:     "./outbox/",
			Test:    "TestMark_NeverCountsAttempts",
		},
		Mutation{
			Name:    "outbox mark: dispatched mark increments attempts",
			File:    "outbox/mark.go",
			Find:    "SET status = 'dispatched', dispatched_at = now(),",
			Replace: "SET status = 'dispatched', attempts = attempts + 1, dispatched_at = now(),",
			Pkg:     "./outbox/",
			Test:    "TestMark_NeverCountsAttempts",
		},
		Mutation{
			Name:    "outbox dispatch: start rows without a full row budget left",
			File:    "outbox/dispatcher.go",
			Find:    "time.Until(deadline) < d.leases.PerRowBudget",
			Replace: "time.Until(deadline) < 0",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_UnstartedRowsReleased",
		},
		Mutation{
			Name:    "outbox dispatch: unstarted rows wait out their lease",
			File:    "outbox/batch.go",
			Find:    "n, err := claim.Release(ctx, b.d.db, table, ids, why, b.d.logger)",
			Replace: "n, err := claim.Release(ctx, b.d.db, table, nil, why, b.d.logger)",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_UnstartedRowsReleased",
		},
		Mutation{
			Name:    "outbox dispatch: a row's panic is not recovered",
			File:    "outbox/send.go",
			Find:    "if v := recover(); v != nil {\n\t\t\td.logger.Error(\"email row panicked",
			Replace: "if v := any(nil); v != nil {\n\t\t\td.logger.Error(\"email row panicked",
			Pkg:     "./outbox/",
			Test:    "TestDrain_PanicAtEverySiteIsRecordedAndCounted",
		},
		Mutation{
			Name:    "outbox dispatch: permanent errors ride the backoff",
			File:    "outbox/send.go",
			Find:    "case errors.Is(err, smtp.ErrPermanent):\n\t\treturn OutcomeFailed",
			Replace: "case false:\n\t\treturn OutcomeFailed",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_PermanentErrorFailsAfterOneAttempt",
		},
		Mutation{
			Name:    "outbox dispatch: decode errors ride the backoff",
			File:    "outbox/send.go",
			Find:    "\t\treturn OutcomeFailed, row.decodeErr",
			Replace: "\t\treturn OutcomeRetry, row.decodeErr",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_DecodeErrorFailsAtOnce",
		},
		Mutation{
			// Both the claim-time check and the pre-send re-check read the
			// list through suppressions.check.
			Name:    "outbox dispatch: suppression list not consulted",
			File:    "outbox/suppression.go",
			Find:    "reason, ok := s.reasons[addr]",
			Replace: `reason, ok := s.reasons["nobody@invalid.example"]`,
			Pkg:     "./outbox/",
			Test:    "TestDispatch_SuppressedRecipientFails",
		},
		Mutation{
			Name:    "outbox dispatch: transient failures never run out of slots",
			File:    "outbox/send.go",
			Find:    "Counted: max(row.Attempts-row.throttles, 1), Backoff: d.backoff}",
			Replace: "Counted: min(max(row.Attempts-row.throttles, 1), len(d.backoff)), Backoff: d.backoff}",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_TransientBackoffThenFailedWhenSlotsRunOut",
		},
		Mutation{
			Name:    "outbox requeue: any state is requeued",
			File:    "outbox/requeue.go",
			Find:    "WHERE id = $1 AND status = 'failed'`",
			Replace: "WHERE id = $1`",
			Pkg:     "./outbox/",
			Test:    "TestRequeue_OnlyFailed",
		},
		Mutation{
			Name:    "outbox read: ListByCustomer without its 30-day window",
			File:    "outbox/read.go",
			Find:    "AND created_at > now() - $2::interval",
			Replace: "AND $2::interval IS NOT NULL",
			Pkg:     "./outbox/",
			Test:    "TestReadAPIs_CustomerWindowAndUnboundedInvoice",
		},
		Mutation{
			Name:    "idempotency: the repeat's lookup of the holder is not pinned to the customer",
			File:    "outbox/enqueue.go",
			Find:    "WHERE customer_id = $1 AND idempotency_key = $2`",
			Replace: "WHERE $1::text IS NOT NULL AND idempotency_key = $2 ORDER BY created_at LIMIT 1`",
			Pkg:     "./outbox/",
			Test:    "TestEnqueue_IdempotencyKeyConcurrent",
		},
	)
}

func init() {
	register(Mutation{
		Name:    "outbox claim: order NULLS FIRST on a NOT NULL due column (sorts every due row per batch)",
		File:    "internal/engine/claim/claim.go",
		Find:    "\treturn due, col\n",
		Replace: "\treturn due, col + \" NULLS FIRST\"\n",
		Pkg:     "./outbox/",
		Test:    "TestClaim_ReadsItsPartialIndex",
	}, Mutation{
		Name:    "outbox claim: rows found by a semi-join (a sequential scan for a multi-batch claim)",
		File:    "internal/engine/claim/claim.go",
		Find:    "WHERE id = ANY (ARRAY(%[3]s))",
		Replace: "WHERE id IN (%[3]s)",
		Pkg:     "./outbox/",
		Test:    "TestClaim_ReadsItsPartialIndex",
	}, Mutation{
		Name:    "attempt log: marks append nothing",
		File:    "outbox/mark.go",
		Find:    "'%[3]s', %[4]s FROM marked",
		Replace: "'%[3]s', %[4]s FROM marked WHERE false",
		Pkg:     "./outbox/",
		Test:    "TestAttempts_EveryMarkLogsItsAttempt",
	}, Mutation{
		Name:    "attempt log: a late mark is logged under the row's current count",
		File:    "outbox/mark.go",
		Find:    "CASE WHEN $%[2]d::int > 0 THEN $%[2]d::int ELSE attempts END",
		Replace: "attempts + 0*$%[2]d::int",
		Pkg:     "./outbox/",
		Test:    "TestAttempts_LateMarkKeepsItsNumberAndStaleMarksLogNothing",
	})
}
