package main

// Mutations of the pool-wide email send rate (EMAIL_RATE_LIMIT: a token
// bucket taken from in the claim's transaction, and the lane that waits
// for it) and of relay throttling (retried in seconds, outside the retry
// budget). Each names the test that must turn red.
func init() {
	register(
		Mutation{
			Name:    "email rate limit: the bucket is ignored in the claim",
			File:    "internal/engine/claim/bucket.go",
			Find:    `const bucketLimit = "least($1::int, (SELECT floor(tokens)::int FROM bucket))"`,
			Replace: `const bucketLimit = "$1::int"`,
			Pkg:     "./outbox/",
			Test:    "TestRateLimit_ConcurrentLanesNeverClaimMoreThanTheBucket",
		},
		Mutation{
			Name:    "email rate limit: claims do not take turns on the bucket (no lock)",
			File:    "internal/engine/claim/bucket.go",
			Find:    "const bucketLockSQL = `INSERT INTO postbox_rate_buckets (name) VALUES ($1)\nON CONFLICT (name) DO UPDATE SET tokens = postbox_rate_buckets.tokens WHERE false`",
			Replace: "const bucketLockSQL = `SELECT $1::text`",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestClaimFair_LimitedClaimsTakeTurnsOnTheBucket",
		},
		Mutation{
			Name:    "email rate limit: a short claim says nothing of when tokens come back",
			File:    "outbox/claim.go",
			Find:    "wait := again(d.bucket, held)",
			Replace: "wait := again(d.bucket, claim.Held{Tokens: held.Tokens})",
			Pkg:     "./outbox/",
			Test:    "TestRateLimit_AShortClaimSaysWhenTokensComeBack",
		},
		Mutation{
			Name:    "email rate limit: the lane hot-polls a claim the bucket held short",
			File:    "internal/engine/lane.go",
			Find:    "\t\tcase c.Again > 0:\n",
			Replace: "\t\tcase c.Again > 0 && false:\n",
			Pkg:     "./internal/engine/",
			Test:    "TestLane_HeldRowsClaimedWhenTheSourceSays",
		},
		Mutation{
			Name:    "email rate limit: a drain ends at a claim the bucket held short",
			File:    "internal/engine/lane.go",
			Find:    "\t\tcase c.Again > 0:\n",
			Replace: "\t\tcase c.Again > 0 && !opts.UntilIdle:\n",
			Pkg:     "./internal/engine/",
			Test:    "TestLane_DrainWaitsOutHeldRows",
		},
		Mutation{
			Name:    "email throttle: counted as an attempt toward giving up",
			File:    "outbox/send.go",
			Find:    "Counted: max(row.Attempts-row.throttles, 1), Backoff: d.backoff}",
			Replace: "Counted: max(row.Attempts, 1), Backoff: d.backoff}",
			Pkg:     "./outbox/",
			Test:    "TestThrottle_RetriedInSecondsWithoutSpendingTheBudget",
		},
		Mutation{
			Name:    "email throttle: the mark does not record the throttle",
			File:    "outbox/mark.go",
			Find:    "throttles = throttles + (attempts = $5::int AND",
			Replace: "throttles = throttles + 0 * (attempts = $5::int AND",
			Pkg:     "./outbox/",
			Test:    "TestThrottle_RetriedInSecondsWithoutSpendingTheBudget",
		},
		Mutation{
			Name:    "email throttle: retried with the normal backoff",
			File:    "outbox/send.go",
			Find:    "a.Wait = d.throttleRetry.jittered()",
			Replace: "a.Wait, _ = d.backoff.Next(max(row.Attempts-row.throttles, 1))",
			Pkg:     "./outbox/",
			Test:    "TestThrottle_RetriedInSecondsWithoutSpendingTheBudget",
		},
		Mutation{
			Name:    "email throttle: SES's 454 Throttling taken for an ordinary failure",
			File:    "smtp/errors.go",
			Find:    "\tcase 454:\n\t\treturn strings.Contains(strings.ToLower(e.Text), \"throttl\")",
			Replace: "\tcase 454:\n\t\treturn false",
			Pkg:     "./smtp/",
			Test:    "TestReplyClasses_Throttling",
		},
		Mutation{
			Name:    "email throttle: a 421 greeting taken for an ordinary failure",
			File:    "smtp/classify.go",
			Find:    "case errors.As(err, &te) && te.Code == 421:",
			Replace: "case errors.As(err, &te) && te.Code == 0:",
			Pkg:     "./smtp/",
			Test:    "TestGreeting_421IsThrottling",
		},
		Mutation{
			Name:    "email throttle: every 451 taken for throttling (an ordinary 451 never counts)",
			File:    "smtp/errors.go",
			Find:    "\t\treturn strings.HasPrefix(e.EnhancedCode, \"4.7.\")",
			Replace: "\t\treturn true",
			Pkg:     "./outbox/",
			Test:    "TestThrottle_RetriedInSecondsWithoutSpendingTheBudget",
		},
		Mutation{
			Name:    "email throttle: a requeue keeps the throttles of the attempts it reset",
			File:    "migrations/sql/00020_email_rate_limit.sql",
			Find:    "    NEW.throttles := 0;",
			Replace: "    NEW.throttles := OLD.throttles;",
			Pkg:     "./outbox/",
			Test:    "TestThrottle_RequeueResetsTheThrottles",
		},
	)
}
