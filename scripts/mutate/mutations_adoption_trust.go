package main

// Mutations of what an adopter has to trust: a cancel decided by the
// row's current claim alone, requeues numbered over the row's life,
// declared secret keys held to the built-in ones' rules, the ordered
// chain's claims, the spans' silence about replies and recipients, the
// signatures' order during a rotation, the wake-up's slot and the
// console's cookie.
func init() {
	register(
		Mutation{
			Name:    "cancel: the lease check looks for the attempt only since created_at (a row made ahead of the database clock cannot be cancelled)",
			File:    "outbox/cancel.go",
			Find:    "a.attempt = email_outbox.prior_attempts + email_outbox.attempts))`",
			Replace: "a.attempt = email_outbox.prior_attempts + email_outbox.attempts AND a.at >= email_outbox.created_at))`",
			Pkg:     "./outbox/",
			Test:    "TestCancel_DecidedByTheCurrentClaimsAttempt",
		},
		Mutation{
			Name:    "cancel: a requeued row's claim is answered by an attempt logged before the requeue",
			File:    "outbox/cancel.go",
			Find:    "a.attempt = email_outbox.prior_attempts + email_outbox.attempts))`",
			Replace: "a.attempt = email_outbox.attempts))`",
			Pkg:     "./outbox/",
			Test:    "TestCancel_DecidedByTheCurrentClaimsAttempt",
		},
		Mutation{
			Name:    "requeue log: a requeue records the attempts since the last requeue, not the lifetime number",
			File:    "migrations/sql/00012_requeue_log.sql",
			Find:    "VALUES (OLD.id, OLD.status, OLD.prior_attempts + OLD.attempts,",
			Replace: "VALUES (OLD.id, OLD.status, OLD.attempts,",
			Pkg:     "./outbox/",
			Test:    "TestAttempts_RequeueRecordsTheLifetimeAttemptNumber",
		},
		Mutation{
			Name:    "secret keys: a declared key spelled otherwise (case, Unicode folding) is sent and kept",
			File:    "outbox/payloadkeys.go",
			Find:    "known = slices.Concat(payloadFieldNames, declared)",
			Replace: "known = slices.Concat(payloadFieldNames)",
			Pkg:     "./outbox/",
			Test:    "TestPayloadKeys_MisspelledKeyFailsNamingTheKey",
		},
		Mutation{
			Name:    "secret keys: the dispatcher's decode is not told its declared keys",
			File:    "outbox/row.go",
			Find:    "row.decode(d.keys, d.secretKeys)",
			Replace: "row.decode(d.keys, nil)",
			Pkg:     "./outbox/",
			Test:    "TestPayloadKeys_MisspelledKeyFailsNamingTheKey",
		},
	)
}
