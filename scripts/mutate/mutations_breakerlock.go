package main

// Mutations of the breaker's locked read (webhook/mark.go): the counts'
// UPDATE writes from the row its lock returned, not from the statement
// snapshot's version, so a mark that waited on another's commit counts
// on top of it.
func init() {
	register(
		Mutation{
			Name:    "breaker lock: a success keeps the window of the statement's snapshot",
			File:    "webhook/mark.go",
			Find:    "WHEN t.ended THEN NULL ELSE t.breaker_window_at END",
			Replace: "WHEN t.ended THEN NULL ELSE ep.breaker_window_at END",
			Pkg:     "./webhook/",
			Test:    "TestBreaker_MarkWaitingOnAnotherMarkCountsOnItsResult",
		},
	)
}
