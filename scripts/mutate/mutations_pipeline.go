package main

// Mutations of the one outcome pipeline (internal/engine/outcome.go): the
// retry-or-fail decision both transports share. Each is named once, with
// the test on each transport that must turn red.
func init() {
	for _, t := range []struct{ pkg, test string }{
		{"./outbox/", "TestDispatch_TransientBackoffThenFailedWhenSlotsRunOut"},
		{"./webhook/", "TestRetry_TransientFailuresEndInFailed"},
	} {
		register(
			Mutation{
				Name:    "outcome pipeline: the attempt limit is dropped, a transient failure retries for ever (" + t.pkg + ")",
				File:    "internal/engine/outcome.go",
				Find:    "if a.Counted < 1 || a.Counted > len(a.Backoff) {",
				Replace: "if a.Counted < 1 {",
				Pkg:     t.pkg,
				Test:    t.test,
			},
		)
	}
}
