package main

// Mutations pinned in the engine's and the migrations' own packages (issue
// 25 point 13), where before they were caught only from the packages
// that use them: a Lane's slots and its claim rhythm (internal/engine,
// with an in-memory Source), and the schema's CHECK constraints
// (migrations, each refused and accepted at its edge).
func init() {
	const (
		laneGo    = "internal/engine/lane.go"
		slotsGo   = "internal/engine/slots.go"
		laneTests = "./internal/engine/"
		when      = "TestLane_WhenItClaimsAgain"
		refill    = "TestLane_BacklogWaitsForRefillFreeSlots"
		checks    = "TestCheckConstraints_RefuseAndAccept"
	)
	register(
		Mutation{
			Name:    "engine: a run's first claim counts as a wake-up's, claiming again at HotPoll with nothing found",
			File:    laneGo,
			Find:    "\t\twoke     bool ",
			Replace: "\t\twoke     = true ",
			Pkg:     laneTests,
			Test:    "TestLane_StartsCold",
		},
		// Slots.
		Mutation{
			Name:    "engine: the slots a claim did not fill are kept, and the lane's share shrinks",
			File:    laneGo,
			Find:    "\t\tl.cfg.Slots.Return(n - min(len(c.Units), n))\n",
			Replace: "",
			Pkg:     laneTests,
			Test:    "TestLane_ReleasesTheSlotsAClaimDidNotFill|TestLane_ShortClaimLeavesTheRestForTheNextClaim",
		},
		Mutation{
			Name:    "engine: a freed slot wakes no waiting lane",
			File:    slotsGo,
			Find:    "\tclose(s.freed)\n\ts.freed = make(chan struct{})\n",
			Replace: "",
			Pkg:     laneTests,
			Test:    refill,
		},
		Mutation{
			Name:    "engine: a backlog claims for every slot freed, Refill ignored",
			File:    laneGo,
			Find:    "least = l.cfg.Refill",
			Replace: "least = 1",
			Pkg:     laneTests,
			Test:    refill,
		},
		Mutation{
			Name:    "engine: Refill defaults to one slot, not an eighth of them",
			File:    laneGo,
			Find:    "cfg.Refill = max(cfg.Slots.Cap()/8, 1)",
			Replace: "cfg.Refill = 1",
			Pkg:     laneTests,
			Test:    refill,
		},
		// The claim rhythm: at once, hot, cold, after a failure.
		Mutation{
			Name:    "engine: a full claim waits for the poll instead of claiming again",
			File:    laneGo,
			Find:    "due, backlog = true, true",
			Replace: "due, backlog = false, true",
			Pkg:     laneTests,
			Test:    when,
		},
		Mutation{
			Name:    "engine: a claim that found rows leaves the lane cold",
			File:    laneGo,
			Find:    "hot = c.Rows > 0 || woke",
			Replace: "hot = woke",
			Pkg:     laneTests,
			Test:    when,
		},
		Mutation{
			Name:    "engine: a wake-up's claim that found nothing leaves the lane cold",
			File:    laneGo,
			Find:    "hot = c.Rows > 0 || woke",
			Replace: "hot = c.Rows > 0 || woke && false",
			Pkg:     laneTests,
			Test:    when,
		},
		Mutation{
			Name:    "engine: a wake-up is not remembered for the claim it brings",
			File:    laneGo,
			Find:    "\t\t\tcase <-l.cfg.Wake:\n\t\t\t\twoke = true\n",
			Replace: "\t\t\tcase <-l.cfg.Wake:\n",
			Pkg:     laneTests,
			Test:    when,
		},
		Mutation{
			Name:    "engine: a hot lane waits the idle poll",
			File:    laneGo,
			Find:    "wait = l.cfg.HotPoll",
			Replace: "wait = l.cfg.Poll",
			Pkg:     laneTests,
			Test:    when,
		},
		Mutation{
			Name:    "engine: a lane once hot stays hot, polling at HotPoll with nothing found",
			File:    laneGo,
			Find:    "hot = c.Rows > 0 || woke",
			Replace: "hot = hot || c.Rows > 0 || woke",
			Pkg:     laneTests,
			Test:    "TestLane_ColdAfterAnEmptyClaim|" + when,
		},
		Mutation{
			Name:    "engine: a wake-up is remembered past its claim, keeping the lane hot",
			File:    laneGo,
			Find:    "\t\twoke = false\n\t}\n",
			Replace: "\t}\n",
			Pkg:     laneTests,
			Test:    when,
		},
		Mutation{
			Name:    "engine: a lane with no wake-ups goes cold after its first empty claim",
			File:    laneGo,
			Find:    "if cfg.HotFor <= 0 && cfg.Wake == nil {",
			Replace: "if false {",
			Pkg:     laneTests,
			Test:    "TestLane_HotForAfterRowsWithoutWakeUps",
		},
		Mutation{
			Name:    "engine: HotFor is ignored, every lane going cold after its first empty claim",
			File:    laneGo,
			Find:    "if (c.Rows > 0 || woke) && l.cfg.HotFor > 0 {",
			Replace: "if false {",
			Pkg:     laneTests,
			Test:    "TestLane_HotForAfterRowsWithoutWakeUps",
		},
		Mutation{
			Name:    "engine: a wake-up does not make a lane given HotFor hot for it",
			File:    laneGo,
			Find:    "if (c.Rows > 0 || woke) && l.cfg.HotFor > 0 {",
			Replace: "if c.Rows > 0 && l.cfg.HotFor > 0 {",
			Pkg:     laneTests,
			Test:    "TestLane_HotForAfterAWakeUp",
		},
		Mutation{
			Name:    "engine: a lane with wake-ups stays hot for DefaultHotFor too",
			File:    laneGo,
			Find:    "if cfg.HotFor <= 0 && cfg.Wake == nil {",
			Replace: "if cfg.HotFor <= 0 {",
			Pkg:     laneTests,
			Test:    "TestLane_ColdAfterAnEmptyClaim|" + when,
		},
		Mutation{
			Name:    "engine: a failed claim is retried at once, hammering a failing database",
			File:    laneGo,
			Find:    "\"error\", err.Error())\n\t\t\tdue, backlog, hot = false, false, false",
			Replace: "\"error\", err.Error())\n\t\t\tdue, backlog, hot = true, false, false",
			Pkg:     laneTests,
			Test:    when,
		},

		// CHECK constraints: one dropped, one loosened, one per kind.
		Mutation{
			Name:    "migrations: a dispatched email row need not say when",
			File:    "migrations/sql/00001_email_outbox.sql",
			Find:    ",\n    CHECK ((status = 'dispatched') = (dispatched_at IS NOT NULL) OR status = 'skipped')",
			Replace: "",
			Pkg:     "./migrations/",
			Test:    checks,
		},
		Mutation{
			Name:    "migrations: any webhook secret starting whsec, its underscore a LIKE wildcard",
			File:    "migrations/sql/00002_webhooks.sql",
			Find:    `secret          text        NOT NULL CHECK (secret LIKE 'whsec\_%'),`,
			Replace: `secret          text        NOT NULL CHECK (secret LIKE 'whsec_%'),`,
			Pkg:     "./migrations/",
			Test:    checks,
		},
		Mutation{
			Name:    "migrations: an attempt's status code unbounded",
			File:    "migrations/sql/00018_history_partitions.sql",
			Find:    "CONSTRAINT webhook_delivery_attempts_status_code_check CHECK (status_code BETWEEN 100 AND 599),",
			Replace: "CONSTRAINT webhook_delivery_attempts_status_code_check CHECK (true),",
			Pkg:     "./migrations/",
			Test:    checks,
		},
		Mutation{
			Name:    "migrations: an endpoint url may carry a fragment",
			File:    "migrations/sql/00006_hardening.sql",
			Find:    "CHECK (url !~ '^[^:/?#]+://[^/?#]*@' AND url !~ '#') NOT VALID;",
			Replace: "CHECK (url !~ '^[^:/?#]+://[^/?#]*@') NOT VALID;",
			Pkg:     "./migrations/",
			Test:    checks,
		},
		Mutation{
			Name:    "migrations: a bounce without a class, a delivery with one",
			File:    "migrations/sql/00018_history_partitions.sql",
			Find:    "CONSTRAINT email_events_check CHECK ((type = 'bounced') = (bounce_class IS NOT NULL))",
			Replace: "CONSTRAINT email_events_check CHECK (true)",
			Pkg:     "./migrations/",
			Test:    checks,
		},
		Mutation{
			Name:    "migrations: webhook idempotency keys of 256 bytes",
			File:    "migrations/sql/00008_webhook_controls.sql",
			Find:    "webhook_outbox_idempotency_key_format\n    CHECK (idempotency_key <> '' AND octet_length(idempotency_key) <= 255);",
			Replace: "webhook_outbox_idempotency_key_format\n    CHECK (idempotency_key <> '' AND octet_length(idempotency_key) <= 256);",
			Pkg:     "./migrations/",
			Test:    checks,
		},
		Mutation{
			Name:    "engine: a freed slot goes to any ranked waiter, not the oldest",
			File:    slotsGo,
			Find:    "if s.used < s.cap && s.lowest() == rank {",
			Replace: "if s.used < s.cap {",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_RankedWaitersGoOldestFirst",
		},
		Mutation{
			Name:    "engine: OlderWaits sees no waiter",
			File:    slotsGo,
			Find:    "return len(s.ranks) > 0 && s.lowest() < rank",
			Replace: "return false",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_RankedWaitersGoOldestFirst",
		},
		Mutation{
			Name:    "engine: a ranked waiter that gives up stays in the queue",
			File:    slotsGo,
			Find:    "\t\t\ts.mu.Lock()\n\t\t\ts.leave(rank)\n\t\t\ts.wake() // the next in rank may now be the lowest\n",
			Replace: "\t\t\ts.mu.Lock()\n",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_RankedWaiterThatGivesUpLeavesTheQueue",
		},
		Mutation{
			Name:    "engine: a plain Acquire takes a slot a ranked waiter waits for",
			File:    slotsGo,
			Find:    "if free := s.cap - s.used - len(s.ranks); free >= least {",
			Replace: "if free := s.cap - s.used; free >= least {",
			Pkg:     "./internal/engine/",
			Test:    "TestSlots_FreedSlotGoesToARankedWaiterBeforeAPlainAcquire",
		},
		Mutation{
			Name:    "engine: a ranked unit beyond its claim's slots waits unranked",
			File:    "internal/engine/lane.go",
			Find:    "\tif rank, ok := rankOf(u); ok {\n",
			Replace: "\tif rank, ok := rankOf(u); ok && false {\n",
			Pkg:     "./internal/engine/",
			Test:    "TestLane_RankedUnitBeyondTheSlotsWaitsInRank",
		},
	)
}
