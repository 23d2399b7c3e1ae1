package main

// Mutations of the pool engine (internal/engine, jobs, cmd/worker): the
// per-process caps, the wake-ups, the pool-wide gates (see
// docs/design/outbox-transport.md, Retry gating), panic isolation at every
// goroutine a drain starts, mark retries, shifts and their keeper.
func init() {
	const (
		laneGo    = "internal/engine/lane.go"
		gateGo    = "internal/engine/gate.go"
		slotsGo   = "internal/engine/slots.go"
		wakeSQL   = "migrations/sql/00005_wake_gates.sql"
		shiftGo   = "jobs/shift.go"
		claimGo   = "internal/engine/claim/claim.go"
		panicTest = "TestDrain_PanicAtEverySiteIsRecordedAndCounted"
	)
	register(
		// Caps.
		Mutation{
			Name:    "caps: each drain gets slots of its own (email)",
			File:    slotsGo,
			Find:    "return &Slots{cap: max(n, 1), freed: make(chan struct{}), looser: make(chan struct{}), keys: map[string]*keyUse{}}",
			Replace: "return &Slots{cap: max(n, 1) * 4, freed: make(chan struct{}), looser: make(chan struct{}), keys: map[string]*keyUse{}}",
			Pkg:     "./outbox/",
			Test:    "TestDrain_ConcurrencyCapsSendsAcrossConcurrentDrains",
		},
		Mutation{
			Name:    "caps: each drain gets slots of its own (webhook)",
			File:    slotsGo,
			Find:    "return &Slots{cap: max(n, 1), freed: make(chan struct{}), looser: make(chan struct{}), keys: map[string]*keyUse{}}",
			Replace: "return &Slots{cap: max(n, 1) * 4, freed: make(chan struct{}), looser: make(chan struct{}), keys: map[string]*keyUse{}}",
			Pkg:     "./webhook/",
			Test:    "TestPipeline_ConcurrencyCapsAttemptsAcrossConcurrentRuns",
		},
		Mutation{
			Name:    "caps: a short claim goes out as one batch, one row after another",
			File:    "outbox/claim.go",
			Find:    "k := min(n, len(rows))",
			Replace: "k := min(n, (len(rows)+4)/5)",
			Pkg:     "./outbox/",
			Test:    "TestClaim_DealsRowsAcrossTheFreeSlots",
		},
		// Wake-ups.
		Mutation{
			Name:    "wake-up: the insert trigger notifies nobody",
			File:    wakeSQL,
			Find:    "PERFORM pg_notify('postbox_wake', TG_TABLE_NAME);",
			Replace: "NULL;",
			Pkg:     "./outbox/",
			Test:    "TestRun_PlainInsertWakesTheLane",
		},
		Mutation{
			Name:    "wake-up: worker run subscribes its email lane to nothing",
			File:    "cmd/worker/replica.go",
			Find:    "\t\tWake:        waker.Email,\n",
			Replace: "",
			Pkg:     "./cmd/worker/",
			Test:    "TestRun_PlainInsertWakesTheReplica",
		},
		Mutation{
			Name:    "wake-up: lanes ignore wake-ups",
			File:    laneGo,
			Find:    "case <-l.cfg.Wake:",
			Replace: "case <-make(chan struct{}):",
			Pkg:     "./outbox/",
			Test:    "TestRun_PlainInsertWakesTheLane",
		},
		Mutation{
			Name:    "wake-up: every inserting transaction notifies (their commits serialise)",
			File:    wakeSQL,
			Find:    "IF pg_try_advisory_xact_lock(",
			Replace: "IF true OR pg_try_advisory_xact_lock(",
			Pkg:     "./internal/engine/",
			Test:    "TestWakeTrigger_RateLimitedAndNeverWaits",
		},
		// Gates (see docs/design/outbox-transport.md, Retry gating).
		Mutation{
			Name:    "gate: a second retry pass runs beside the first",
			File:    gateGo,
			Find:    "WHERE postbox_gates.expires_at <= now()",
			Replace: "WHERE true",
			Pkg:     "./jobs/",
			Test:    "TestPasses_OnePassPoolWideAtATime",
		},
		Mutation{
			Name:    "gate: a dead holder's gate never frees",
			File:    gateGo,
			Find:    "WHERE postbox_gates.expires_at <= now()",
			Replace: "WHERE false",
			Pkg:     "./internal/engine/",
			Test:    "TestGate_DeadHolderFreesTheGateWithinItsLease",
		},
		Mutation{
			Name:    "gate: a pass that lost its lease goes on",
			File:    gateGo,
			Find:    "lost(errGateLost)",
			Replace: "_ = errGateLost",
			Pkg:     "./internal/engine/",
			Test:    "TestGate_LostLeaseCancelsThePass",
		},
		// Panic isolation, one per site.
		Mutation{
			Name:    "panic: a batch's panic is not recovered",
			File:    laneGo,
			Find:    "if v := recover(); v != nil {\n\t\t\tt = l.recovered(",
			Replace: "if v := any(nil); v != nil {\n\t\t\tt = l.recovered(",
			Pkg:     "./outbox/",
			Test:    panicTest,
		},
		Mutation{
			Name:    "panic: a decode panic is not recovered",
			File:    "outbox/row.go",
			Find:    "if v := recover(); v != nil {\n\t\t\td.logger.Error(\"email row decode panicked",
			Replace: "if v := any(nil); v != nil {\n\t\t\td.logger.Error(\"email row decode panicked",
			Pkg:     "./outbox/",
			Test:    panicTest,
		},

		Mutation{
			Name:    "panic: a mark's bookkeeping panic is not recovered",
			File:    "outbox/batch.go",
			Find:    "if v := recover(); v != nil {\n\t\t\tb.d.logger.Error(\"email mark bookkeeping panicked",
			Replace: "if v := any(nil); v != nil {\n\t\t\tb.d.logger.Error(\"email mark bookkeeping panicked",
			Pkg:     "./outbox/",
			Test:    panicTest,
		},
		Mutation{
			Name:    "panic: a mark group's panic is not recovered",
			File:    "internal/engine/claim/group.go",
			Find:    "if v := recover(); v != nil {\n\t\t\tg.logger.Error(",
			Replace: "if v := any(nil); v != nil {\n\t\t\tg.logger.Error(",
			Pkg:     "./outbox/",
			Test:    panicTest,
		},
		Mutation{
			Name:    "panic: a webhook first attempt's panic is not recovered",
			File:    "webhook/unit.go",
			Find:    "\tt, _ := u.p.record(ctx, u.d, &m, classed{class: engine.Transient}, false, false, nil)\n\treturn t\n}",
			Replace: "\tt := Tally{Panics: m.Attempt * 0}\n\treturn t\n}",
			Pkg:     "./webhook/",
			Test:    "TestPipeline_PanicAtEverySiteIsRecordedAndCounted",
		},
		Mutation{
			Name:    "panic: a webhook fan-out's panic is not recorded on its deliveries",
			File:    "webhook/outbox.go",
			Find:    "c.Tally.Add((&attemptUnit{p: p, d: d}).Panicked(ctx, v))",
			Replace: "_ = d",
			Pkg:     "./webhook/",
			Test:    "TestPipeline_PanicAtEverySiteIsRecordedAndCounted",
		},
		Mutation{
			Name:    "panic: a shift's recovered panics are not reported to River",
			File:    shiftGo,
			Find:    "return errors.Join(err, t.Err())",
			Replace: "return err",
			Pkg:     "./jobs/",
			Test:    "TestShift_PanicErrorsTheJobAndTheReplicaLivesOn",
		},
		// Marks.
		Mutation{
			Name:    "marks: tried once, so a Postgres blip re-sends what was delivered",
			File:    claimGo,
			Find:    "if err == nil || !Retriable(err) || time.Now().Add(delay).After(until) {",
			Replace: "if true {",
			Pkg:     "./outbox/",
			Test:    "TestMark_RetriedAcrossAConnectionCut",
		},
		// Shifts.
		Mutation{
			Name:    "shift: what it did is not recorded as its River output",
			File:    shiftGo,
			Find:    "if oerr := river.RecordOutput(ctx, shiftOutput(job.Args.Lane, t)); oerr != nil {",
			Replace: "if oerr := error(nil); oerr != nil {",
			Pkg:     "./jobs/",
			Test:    "TestShift_DrainsHandsOverAndRecordsItsOutput",
		},
		Mutation{
			Name:    "keeper: dead replicas' shifts are left behind",
			File:    shiftGo,
			Find:    "Where(\"queue <> @queue AND scheduled_at < now() - @after::interval\"",
			Replace: "Where(\"false AND queue <> @queue AND scheduled_at < now() - @after::interval\"",
			Pkg:     "./jobs/",
			Test:    "TestKeeper_DeletesDeadReplicasShifts",
		},
		// Shutdown and the HTTP server.
		Mutation{
			Name:    "pool: shutdown does not stop the dispatcher's claims",
			File:    "cmd/worker/replica.go",
			Find:    "\tr.dispatcher.Stop()\n",
			Replace: "",
			Pkg:     "./cmd/worker/",
			Test:    "TestPool_SIGTERMMidDrainLosesAndResendsNothing",
		},
		Mutation{
			Name:    "pool: River UI served without its basic auth",
			File:    "cmd/worker/server.go",
			Find:    `mux.Handle("/riverui/", riverUIAuth(env.Config, env.Logger, ui))`,
			Replace: `mux.Handle("/riverui/", ui)`,
			Pkg:     "./cmd/worker/",
			Test:    "TestRunBootsServesAndStopsOnSIGTERM",
		},
		Mutation{
			Name:    "gate: a holder whose lease ran out deletes the new holder's row",
			File:    "internal/engine/gate.go",
			Find:    "`DELETE FROM postbox_gates WHERE name = $1 AND holder = $2`, g.Name, h.holder)",
			Replace: "`DELETE FROM postbox_gates WHERE name = $1`, g.Name)",
			Pkg:     "./internal/engine/",
			Test:    "TestGate_ExpiredHolderLeavesTheNewHoldersRow",
		},
		Mutation{
			Name:    "gate: renewed less often than its lease",
			File:    "internal/engine/gate.go",
			Find:    "every := max(g.Lease/3, 10*time.Millisecond)",
			Replace: "every := max(g.Lease*3, 10*time.Millisecond)",
			Pkg:     "./internal/engine/",
			Test:    "TestGate_RenewalKeepsALongPassExclusive",
		},
	)
}
