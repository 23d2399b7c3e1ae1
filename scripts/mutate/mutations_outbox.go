package main

// Mutations of the email outbox (ADR-072 decisions 1, 2, 3, 5 and the
// 2026-10-13 scrub), each named with the outbox test that must catch it.
// The claim mutations edit the shared internal/claim code; the webhook
// side registers its own entries naming webhook tests.
func init() {
	register(
		Mutation{
			Name:    "outbox claim: drop FOR UPDATE SKIP LOCKED",
			File:    "internal/claim/claim.go",
			Find:    "\tFOR UPDATE SKIP LOCKED)",
			Replace: "\t)",
			Pkg:     "./outbox/",
			Test:    "TestClaim_SkipsRowsLockedBySibling",
		},
		Mutation{
			Name:    "outbox claim: FOR UPDATE without SKIP LOCKED",
			File:    "internal/claim/claim.go",
			Find:    "FOR UPDATE SKIP LOCKED)",
			Replace: "FOR UPDATE)",
			Pkg:     "./outbox/",
			Test:    "TestClaim_SkipsRowsLockedBySibling",
		},
		Mutation{
			// The parameter stays referenced so the statement still runs:
			// only the lease is gone.
			Name:    "outbox claim: drop the lease stamp",
			File:    "internal/claim/claim.go",
			Find:    "%[2]s = now() + $2::interval",
			Replace: "%[2]s = %[2]s + 0 * $2::interval",
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
			Name:    "outbox mark: run on the batch context",
			File:    "outbox/mark.go",
			Find:    "ctx, cancel := claim.MarkContext(ctx)",
			Replace: "ctx, cancel := context.WithCancel(ctx); _ = claim.MarkContext",
			Pkg:     "./outbox/",
			Test:    "TestMark_SurvivesBatchContextDeath",
		},
		Mutation{
			Name:    "outbox scrub: dropped from the dispatched and skipped marks",
			File:    "outbox/scrub.go",
			Find:    `THEN payload - " + scrubbedKeysSQL + " ELSE payload END"`,
			Replace: `THEN payload ELSE payload END"`,
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
			File:    "outbox/dispatcher.go",
			Find:    "n, err := claim.Release(ctx, d.db, table, ids)",
			Replace: "n, err := int64(0), error(nil)",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_UnstartedRowsReleased",
		},
		Mutation{
			Name:    "outbox dispatch: a row's panic is not recovered",
			File:    "outbox/row.go",
			Find:    "if v := recover(); v != nil {\n\t\t\td.logger.Error(\"email row panicked",
			Replace: "if v := any(nil); v != nil {\n\t\t\td.logger.Error(\"email row panicked",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_PanicRowDoesNotStrandBatch",
		},
		Mutation{
			Name:    "outbox dispatch: permanent errors ride the backoff",
			File:    "outbox/row.go",
			Find:    "case errors.Is(err, smtp.ErrPermanent):\n\t\treturn OutcomeFailed",
			Replace: "case false:\n\t\treturn OutcomeFailed",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_PermanentErrorFailsAfterOneAttempt",
		},
		Mutation{
			Name:    "outbox dispatch: decode errors ride the backoff",
			File:    "outbox/row.go",
			Find:    "if row.decodeErr != nil {\n\t\treturn OutcomeFailed, row.decodeErr",
			Replace: "if row.decodeErr != nil {\n\t\treturn OutcomeRetry, row.decodeErr",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_DecodeErrorFailsAtOnce",
		},
		Mutation{
			Name:    "outbox dispatch: suppression list not consulted",
			File:    "outbox/row.go",
			Find:    "err = supp.check(sctx, d.db, row.recipient)",
			Replace: `err = supp.check(sctx, d.db, "nobody@invalid.example")`,
			Pkg:     "./outbox/",
			Test:    "TestDispatch_SuppressedRecipientFails",
		},
		Mutation{
			Name:    "outbox dispatch: transient failures never run out of slots",
			File:    "outbox/row.go",
			Find:    "wait, ok := d.backoff.Next(row.Attempts)",
			Replace: "wait, ok := d.backoff.Next(min(row.Attempts, len(d.backoff)))",
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
			Name:    "outbox jobs: the kick is not unique",
			File:    "jobs/unique.go",
			Find:    "UniqueOpts:  river.UniqueOpts{ByState: uniqueStates, ByPeriod: UniquePeriod},",
			Replace: "",
			Pkg:     "./jobs/",
			Test:    "TestEmailKick_BurstLeavesOnePendingKick",
		},
	)
}

func init() {
	register(Mutation{
		Name:    "outbox claim: order NULLS FIRST on a NOT NULL due column (sorts every due row per batch)",
		File:    "internal/claim/claim.go",
		Find:    "due, order := fmt.Sprintf(\"%s <= now()\", t.DueColumn), t.DueColumn",
		Replace: "due, order := fmt.Sprintf(\"%s <= now()\", t.DueColumn), t.DueColumn+\" NULLS FIRST\"",
		Pkg:     "./outbox/",
		Test:    "TestClaim_ReadsItsPartialIndex",
	})
}
