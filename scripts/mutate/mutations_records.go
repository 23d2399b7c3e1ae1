package main

// The records an operator reads: the attempt log after a requeue (and the
// requeue itself, with who ran it), the secret keys a sent row lost, the
// breaker's count beside the log's; and the suppression re-check's bound
// as shipped.
func init() {
	register(
		Mutation{
			Name:    "requeue: attempts after a requeue are numbered from 1 again and dropped as repeats",
			File:    "outbox/mark.go",
			Find:    "SELECT id, prior_attempts + CASE WHEN",
			Replace: "SELECT id, CASE WHEN",
			Pkg:     "./outbox/",
			Test:    "TestAttempts_LogGoesOnAfterARequeue",
		},
		Mutation{
			Name:    "requeue: a late mark from before the requeue takes a number the attempts after it need",
			File:    "outbox/mark.go",
			Find:    "WHERE $%[2]d::int <= attempts\n",
			Replace: "",
			Pkg:     "./outbox/",
			Test:    "TestAttempts_LogGoesOnAfterARequeue",
		},
		Mutation{
			Name:    "requeue: the trigger keeps no count of the attempts it reset",
			File:    "migrations/sql/00012_requeue_log.sql",
			Find:    "NEW.prior_attempts := OLD.prior_attempts + greatest(OLD.attempts - NEW.attempts, 0);",
			Replace: "NEW.prior_attempts := OLD.prior_attempts;",
			Pkg:     "./outbox/",
			Test:    "TestAttempts_LogGoesOnAfterARequeue",
		},
		Mutation{
			Name:    "requeue: a plain-SQL requeue is not logged",
			File:    "migrations/sql/00012_requeue_log.sql",
			Find:    "FOR EACH ROW WHEN (OLD.status <> 'pending' AND NEW.status = 'pending')",
			Replace: "FOR EACH ROW WHEN (OLD.status <> 'pending' AND NEW.status = 'pending' AND current_setting('postbox.actor', true) <> '')",
			Pkg:     "./migrations/",
			Test:    "TestRequeueLogUpAndDownWithRows",
		},
		Mutation{
			Name:    "requeue: the caller is not named to the trigger",
			File:    "outbox/requeue.go",
			Find:    "SELECT set_config('postbox.actor', $2, true)",
			Replace: "SELECT set_config('postbox.someone', $2, true)",
			Pkg:     "./outbox/",
			Test:    "TestAttempts_LogGoesOnAfterARequeue",
		},
		Mutation{
			Name:    "requeue: the console names no operator",
			File:    "internal/operator/console/actions.go",
			Find:    "if err := outbox.Requeue(ctx, c.db, id, in.user); err != nil {\n\t\t\t\treturn \"\", err\n\t\t\t}\n\t\t\treturn \"email \" + id + \" requeued: pending",
			Replace: "if err := outbox.Requeue(ctx, c.db, id, \"\"); err != nil {\n\t\t\t\treturn \"\", err\n\t\t\t}\n\t\t\treturn \"email \" + id + \" requeued: pending",
			Pkg:     "./internal/operator/console/",
			Test:    "TestActionsChangeRows",
		},
		Mutation{
			Name:    "requeue: the story prints a requeue as an attempt",
			File:    "internal/operator/story/text.go",
			Find:    "if a.Outcome == outbox.OutcomeRequeued {",
			Replace: "if a.Outcome == outbox.OutcomeRequeued && false {",
			Pkg:     "./internal/operator/story/",
			Test:    "TestFind_EmailRequeueInTheLog",
		},
		Mutation{
			Name:    "requeue: the story takes the attempts after a requeue for unmarked ones",
			File:    "internal/operator/story/text.go",
			Find:    "for n := logged + 1; n <= e.PriorAttempts+e.Attempts; n++ {",
			Replace: "for n := logged + 1; n <= e.PriorAttempts+e.Attempts+1; n++ {",
			Pkg:     "./internal/operator/story/",
			Test:    "TestFind_EmailRequeueInTheLog",
		},
		Mutation{
			Name:    "story: a sent row lists every secret key as scrubbed, had it or not",
			File:    "outbox/lookup.go",
			Find:    "case scrubbed && (r.scrubbedKeys == nil || slices.Contains(r.scrubbedKeys, k)):",
			Replace: "case scrubbed && (true || slices.Contains(r.scrubbedKeys, k)):",
			Pkg:     "./outbox/",
			Test:    "TestScrub_RowNamesOnlyTheKeysItLost",
		},
		Mutation{
			Name:    "story: the scrub does not record which keys it removed",
			File:    "outbox/scrub.go",
			Find:    `" ELSE payload END, " +`,
			Replace: `" ELSE payload END, scrubbed_keys = NULL, " +`,
			Pkg:     "./outbox/",
			Test:    "TestScrub_RowNamesOnlyTheKeysItLost",
		},
		Mutation{
			Name:    "story: the breaker's count is printed even when it contradicts nothing but the log",
			File:    "internal/operator/story/text.go",
			Find:    "if n == 0 || n == h.ConsecutiveFailures {",
			Replace: "if false {",
			Pkg:     "./internal/operator/story/",
			Test:    "TestEndpointText_BreakerCountOnlyWhenItAddsSomething",
		},
		Mutation{
			Name:    "suppressions: the pre-send re-check waits 10 s, not 1 s",
			File:    "outbox/suppression.go",
			Find:    "const SuppressionMaxAge = time.Second",
			Replace: "const SuppressionMaxAge = 10 * time.Second",
			Pkg:     "./outbox/",
			Test:    "TestSuppressionRecheck_ShippedBoundIsOneSecond",
		},
		Mutation{
			Name:    "suppressions: the pre-send re-check never re-reads a loaded view",
			File:    "outbox/suppression.go",
			Find:    "if !v.s.loaded || time.Since(v.s.at) >= maxAge {",
			Replace: "if !v.s.loaded {",
			Pkg:     "./outbox/",
			Test:    "TestSuppressionRecheck_ShippedBoundIsOneSecond",
		},
	)
}
