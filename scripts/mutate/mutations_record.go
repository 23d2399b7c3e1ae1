package main

// Mutations of the outcome pipeline's last stage (internal/engine/record.go):
// engine.Record's stale handling, shared by both transports, killed on each.
func init() {
	register(
		Mutation{
			Name:    "outcome pipeline: a stale email mark is counted as a mark error",
			File:    "internal/engine/record.go",
			Find:    "r.Metrics.Stale(r.Outbox)",
			Replace: "r.Metrics.MarkError(r.Outbox)",
			Pkg:     "./outbox/",
			Test:    "TestMark_StaleFailureAfterSiblingSuccessDropped",
		},
		Mutation{
			Name:    "outcome pipeline: a stale delivery mark is counted as a mark error",
			File:    "internal/engine/record.go",
			Find:    "r.Metrics.Stale(r.Outbox)",
			Replace: "r.Metrics.MarkError(r.Outbox)",
			Pkg:     "./webhook/",
			Test:    "TestAttempt_StaleMarkIsCountedNotApplied",
		},
	)
}
