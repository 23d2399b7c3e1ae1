package main

// Mutations of the bench's webhook pool sections' pure pieces: the window
// counts the rate-limit section reads against its aim, the bursts the
// breaker section reads probes from, the attribution of a delivery to a
// replica, the retry lags, and the receivers' failing modes.
func init() {
	register(
		Mutation{
			Name:    "bench: a window's end belongs to it",
			File:    "internal/tooling/harness/bench/stats.go",
			Find:    "if k := int(a.Sub(origin) / width); k < n {",
			Replace: "if k := int((a.Sub(origin) - 1) / width); k < n && k >= 0 {",
			Pkg:     "./internal/tooling/harness/bench/",
			Test:    "TestCountWindows",
		},
		Mutation{
			Name:    "bench: a gap of exactly the threshold does not split bursts",
			File:    "internal/tooling/harness/bench/stats.go",
			Find:    "if i == 0 || a.Sub(at[i-1]) >= gap {",
			Replace: "if i == 0 || a.Sub(at[i-1]) > gap {",
			Pkg:     "./internal/tooling/harness/bench/",
			Test:    "TestBursts",
		},
		Mutation{
			Name:    "bench: failed requests count for a replica's share",
			File:    "internal/tooling/harness/bench/receivers.go",
			Find:    "		if h.status >= 300 {\n			continue\n		}\n		if i, ok := replicaOf",
			Replace: "		if i, ok := replicaOf",
			Pkg:     "./internal/tooling/harness/bench/",
			Test:    "TestPerReplica",
		},
		Mutation{
			Name:    "bench: every request of a delivery is timed as its retry",
			File:    "internal/tooling/harness/bench/pool_webhook_limits.go",
			Find:    "		if h.nth != 2 {",
			Replace: "		if h.nth < 2 {",
			Pkg:     "./internal/tooling/harness/bench/",
			Test:    "TestRetryLags",
		},
		Mutation{
			Name:    "bench: the fail-first receiver fails every request",
			File:    "internal/tooling/harness/bench/receivers.go",
			Find:    "rc.opts.failFirst && nth == 1,",
			Replace: "rc.opts.failFirst,",
			Pkg:     "./internal/tooling/harness/bench/",
			Test:    "TestReceivers_Answers",
		},
		Mutation{
			Name:    "bench: an event delivered before an earlier one of its key is no inversion",
			File:    "internal/tooling/harness/bench/pool_webhook_ordered.go",
			Find:    "ok && p.seq < prev {",
			Replace: "ok && p.seq < prev && false {",
			Pkg:     "./internal/tooling/harness/bench/",
			Test:    "TestReadOrder",
		},
		Mutation{
			Name:    "bench: a duplicate counts as a delivery of its key again",
			File:    "internal/tooling/harness/bench/pool_webhook_ordered.go",
			Find:    "!ok || seen[h.key] {",
			Replace: "!ok {",
			Pkg:     "./internal/tooling/harness/bench/",
			Test:    "TestReadOrder",
		},
	)
}
