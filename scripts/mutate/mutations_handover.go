package main

// Mutations of the retry lane's hand-over between gate holders (a waiting
// pass takes the gate the moment its holder's claims stop) and of the
// retry lane's wake at the next due delivery (see
// docs/design/outbox-transport.md, Retry gating). Each names the test that
// must turn red.
func init() {
	register(
		Mutation{
			Name:    "retry hand-over: a pass that finds the gate held returns at once",
			File:    "internal/engine/gate.go",
			Find:    "\t\tif err := g.await(ctx, until); err != nil {",
			Replace: "\t\tif err := g.held(ctx); err != nil {",
			Pkg:     "./jobs/",
			Test:    "TestPasses_RetryHandsOverWithoutAGap",
		},
		Mutation{
			Name:    "retry hand-over: a released holder's row stays until its lease runs out",
			File:    "internal/engine/gate.go",
			Find:    "if _, err := g.DB.Exec(ctx, `DELETE FROM postbox_gates WHERE name = $1 AND holder = $2`, g.Name, h.holder); err != nil {",
			Replace: "if _, err := g.DB.Exec(ctx, `SELECT $1::text, $2::text`, g.Name, h.holder); err != nil {",
			Pkg:     "./jobs/",
			Test:    "TestPasses_RetryHandsOverWithoutAGap",
		},
		Mutation{
			Name:    "retry hand-over: the gate is handed on only once the pass's attempts are done",
			File:    "jobs/passes.go",
			Find:    "p.pipeline.RunRetryTurn(hold.Context(), window, func() { _, _ = release() })",
			Replace: "p.pipeline.RunRetryTurn(hold.Context(), window, nil)",
			Pkg:     "./jobs/",
			Test:    "TestPasses_RetryHandsOverWithoutAGap",
		},
		Mutation{
			Name:    "retry hand-over: the lane never says its claims are done",
			File:    "internal/engine/lane.go",
			Find:    "\tif opts.ClaimsDone != nil {\n\t\topts.ClaimsDone()\n\t}",
			Replace: "\tif opts.ClaimsDone != nil {\n\t\tdefer opts.ClaimsDone()\n\t}",
			Pkg:     "./jobs/",
			Test:    "TestPasses_RetryHandsOverWithoutAGap",
		},
		Mutation{
			Name:    "retry hand-over: the holder hands the gate on while its last claim runs",
			File:    "jobs/passes.go",
			Find:    "\twindow := max(time.Until(end), time.Millisecond) // zero would mean no end\n",
			Replace: "\twindow := max(time.Until(end), time.Millisecond) // zero would mean no end\n\tdefer time.AfterFunc(window, func() { _, _ = release() }).Stop()\n",
			Pkg:     "./jobs/",
			Test:    "TestPasses_OnePassPoolWideAtATime",
		},
		Mutation{
			Name:    "retry lane: cold after its first empty claim, the rows an in-flight cap held back left to the poll",
			File:    "webhook/dispatcher.go",
			Find:    "\t\tHotFor: engine.DefaultHotFor,\n",
			Replace: "",
			Pkg:     "./webhook/",
			Test:    "TestMaxInFlight_HoldsAcrossDispatchers",
		},
		Mutation{
			Name:    "retry lane: no wake at the next due delivery (the idle poll alone)",
			File:    "webhook/retry.go",
			Find:    "func (s retrySource) NextDue(ctx context.Context) time.Duration { return s.p.nextRetry(ctx) }",
			Replace: "func (s retrySource) NextDue(ctx context.Context) time.Duration { return 0 * s.p.nextRetry(ctx) }",
			Pkg:     "./webhook/",
			Test:    "TestRetry_IdleLaneWakesWhenTheNextRetryIsDue",
		},
		Mutation{
			Name:    "retry lane: the lane never asks a Scheduled source when its next row is due",
			File:    "internal/engine/lane.go",
			Find:    "} else if s, ok := l.cfg.Source.(Scheduled); ok {",
			Replace: "} else if s, ok := l.cfg.Source.(Scheduled); ok && false {",
			Pkg:     "./webhook/",
			Test:    "TestRetry_IdleLaneWakesWhenTheNextRetryIsDue",
		},
	)
}
