package main

// Mutations of the one outcome pipeline (internal/engine/outcome.go): the
// retry-or-fail decision both transports share, each killed by a test on
// each transport.
func init() {
	register(
		Mutation{
			Name:    "outcome pipeline: the attempt limit is dropped, an email's transient failure retries for ever",
			File:    "internal/engine/outcome.go",
			Find:    "if a.Counted < 1 || a.Counted > len(a.Backoff) {",
			Replace: "if a.Counted < 1 {",
			Pkg:     "./outbox/",
			Test:    "TestDispatch_TransientBackoffThenFailedWhenSlotsRunOut",
		},
		Mutation{
			Name:    "outcome pipeline: the attempt limit is dropped, a delivery's transient failure retries for ever",
			File:    "internal/engine/outcome.go",
			Find:    "if a.Counted < 1 || a.Counted > len(a.Backoff) {",
			Replace: "if a.Counted < 1 {",
			Pkg:     "./webhook/",
			Test:    "TestRetry_TransientFailuresEndInFailed",
		},
	)
}
