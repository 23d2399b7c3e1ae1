package main

func init() {
	register(Mutation{
		Name:    "pool: ticks unique without a period (a killed worker's tick blocks the next ones)",
		File:    "jobs/unique.go",
		Find:    "UniqueOpts:  river.UniqueOpts{ByState: uniqueStates, ByPeriod: UniquePeriod},",
		Replace: "UniqueOpts:  river.UniqueOpts{ByState: uniqueStates},",
		Pkg:     "./jobs/",
		Test:    "TestTick_DeadRunningTickDoesNotStallDelivery",
	}, Mutation{
		Name:    "pool: shutdown does not stop the dispatcher's claims",
		File:    "cmd/worker/replica.go",
		Find:    "\tr.dispatcher.Stop()\n",
		Replace: "",
		Pkg:     "./cmd/worker/",
		Test:    "TestPool_SIGTERMMidDrainLosesAndResendsNothing",
	}, Mutation{
		Name:    "pool: River UI served without its basic auth",
		File:    "cmd/worker/server.go",
		Find:    `mux.Handle("/riverui/", riverUIAuth(env.Config, env.Logger, ui))`,
		Replace: `mux.Handle("/riverui/", ui)`,
		Pkg:     "./cmd/worker/",
		Test:    "TestRunBootsServesAndStopsOnSIGTERM",
	})
}
