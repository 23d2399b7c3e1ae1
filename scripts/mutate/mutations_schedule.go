package main

// Scheduled sends and cancel: a row due later is not claimed before its
// time and costs the claim nothing meanwhile; SendAt is the due time, a
// past one is now; cancel withdraws only a pending row no worker holds,
// scrubs it like a skipped one, is final, and ages out with the pruner;
// show says "scheduled for", not retrying.
func init() {
	register(
		Mutation{
			Name:    "schedule: the claim ignores the due time of rows scheduled ahead",
			File:    "internal/engine/claim/claim.go",
			Find:    `due = col + " <= now()"`,
			Replace: `due = col + " <= now() + interval '1000 days'"`,
			Pkg:     "./outbox/",
			Test:    "TestSendAt_HeldUntilDue",
		},
		Mutation{
			Name:    "schedule: Enqueue ignores SendAt",
			File:    "outbox/enqueue.go",
			Find:    "greatest(coalesce($7::timestamptz, now()), now())",
			Replace: "greatest(coalesce($7::timestamptz - $7::timestamptz + now(), now()), now())",
			Pkg:     "./outbox/",
			Test:    "TestSendAt_HeldUntilDue",
		},
		Mutation{
			Name:    "schedule: a past SendAt is written behind the claim window instead of now",
			File:    "outbox/enqueue.go",
			Find:    "greatest(coalesce($7::timestamptz, now()), now())",
			Replace: "coalesce($7::timestamptz, now())",
			Pkg:     "./outbox/",
			Test:    "TestSendAt_HeldUntilDue",
		},
		Mutation{
			Name:    "schedule: EnqueueEvent ignores SendAt",
			File:    "webhook/enqueue.go",
			Find:    "greatest(coalesce($4::timestamptz, now()), now())",
			Replace: "greatest(coalesce($4::timestamptz - $4::timestamptz + now(), now()), now())",
			Pkg:     "./webhook/",
			Test:    "TestSendAt_EventHeldUntilDue",
		},
		Mutation{
			Name:    "schedule: show says retrying (or waiting) for a scheduled row",
			File:    "internal/operator/story/story.go",
			Find:    "if attempts == 0 && next.After(time.Now()) {",
			Replace: "if false {",
			Pkg:     "./internal/operator/story/",
			Test:    "TestVerdict_ScheduledIsNotRetrying",
		},
		Mutation{
			Name:    "cancel: the CAS drops the not-claimed condition",
			File:    "outbox/cancel.go",
			Find:    "AND NOT ` + leasedSQL",
			Replace: "`",
			Pkg:     "./outbox/",
			Test:    "TestCancel_WhatItTakesAndRefuses",
		},
		Mutation{
			Name:    "cancel: a row backing off after a retry is taken for a claimed one",
			File:    "outbox/cancel.go",
			Find:    "a.attempt = email_outbox.prior_attempts + email_outbox.attempts",
			Replace: "a.attempt = -1",
			Pkg:     "./outbox/",
			Test:    "TestCancel_WhatItTakesAndRefuses",
		},
		Mutation{
			Name:    "cancel: the cancelled email keeps its secret keys",
			File:    "outbox/cancel.go",
			Find:    "200), ` + scrubSet + `",
			Replace: "200)",
			Pkg:     "./outbox/",
			Test:    "TestCancel_WhatItTakesAndRefuses",
		},
		Mutation{
			Name:    "cancel: a webhook row already fanned out is cancelled too",
			File:    "webhook/cancel.go",
			Find:    "WHERE id = $1 AND status = 'pending'`",
			Replace: "WHERE id = $1 AND status <> 'cancelled'`",
			Pkg:     "./webhook/",
			Test:    "TestCancel_OutboxRow",
		},
		Mutation{
			Name:    "cancel: the pruner keeps cancelled webhook rows forever",
			File:    "webhook/prune.go",
			Find:    "\n\t   OR status = 'cancelled' AND cancelled_at < now() - $1::interval",
			Replace: "",
			Pkg:     "./webhook/",
			Test:    "TestCancel_OutboxRow",
		},
		Mutation{
			Name:    "cancel: a plain-SQL requeue of a cancelled row fails obscurely",
			File:    "migrations/sql/00016_scheduled_cancel.sql",
			Find:    "    RAISE EXCEPTION '% row % was cancelled at % by %: a cancelled row is final; enqueue a new one instead',\n",
			Replace: "    RETURN NEW;\n    RAISE EXCEPTION '% row % was cancelled at % by %: a cancelled row is final; enqueue a new one instead',\n",
			Pkg:     "./migrations/",
			Test:    "TestScheduledCancelUpAndDownWithRows",
		},
		Mutation{
			Name:    "cancel: going down loses what a cancelled email was",
			File:    "migrations/sql/00016_scheduled_cancel.sql",
			Find:    "UPDATE email_outbox SET status = 'skipped', cancelled_at = NULL, cancelled_by = NULL,\n    last_error = left(",
			Replace: "UPDATE email_outbox SET status = 'skipped', cancelled_at = NULL, cancelled_by = NULL,\n    last_error = NULL AND left(",
			Pkg:     "./migrations/",
			Test:    "TestScheduledCancelUpAndDownWithRows",
		},
		Mutation{
			Name:    "schedule: the webhook_outbox page says next attempt of a scheduled row",
			File:    "internal/operator/console/templates/story.html",
			Find:    `{{if eq .Status "pending"}}, {{due .Attempts .NextAttemptAt}} {{ts .NextAttemptAt}}{{end}}</p>`,
			Replace: `{{if eq .Status "pending"}}, next attempt {{ts .NextAttemptAt}}{{end}}</p>`,
			Pkg:     "./internal/operator/console/",
			Test:    "TestCancelActions",
		},
	)
}
