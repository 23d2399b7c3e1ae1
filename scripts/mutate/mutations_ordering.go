package main

// Mutations of ordered delivery (docs/design/outbox-transport.md, Ordered
// delivery): each rule of the wait, the fan-out's holds, the trigger that
// hands a key on, the head-failure policy and its skip, and where replays
// and requeues take their place.
func init() {
	const (
		orderingGo = "webhook/ordering.go"
		pkg        = "./webhook/"
		claimRules = "TestOrdering_ClaimTakesOnlyTheHeadOfEachKey"
		migration  = "migrations/sql/00023_webhook_ordering.sql"
	)
	register(
		Mutation{
			Name:    "ordering: the retry claim takes a key's later deliveries beside its head",
			File:    "webhook/throttle.go",
			Find:    "\tAND NOT %s\nORDER BY %s\nLIMIT $1\nFOR UPDATE OF d SKIP LOCKED`",
			Replace: "\tAND (true OR %s)\nORDER BY %s\nLIMIT $1\nFOR UPDATE OF d SKIP LOCKED`",
			Pkg:     pkg,
			Test:    claimRules,
		},
		Mutation{
			Name:    "ordering: a head waiting for its retry does not hold its key",
			File:    orderingGo,
			Find:    "AND (ahead.status = 'pending' OR (",
			Replace: "AND ((ahead.status = 'pending' AND ahead.next_retry_at <= now()) OR (",
			Pkg:     pkg,
			Test:    claimRules,
		},
		Mutation{
			Name:    "ordering: one key waits for another key's deliveries",
			File:    orderingGo,
			Find:    "AND ahead.ordering_key = %[2]s AND",
			Replace: "AND",
			Pkg:     pkg,
			Test:    claimRules,
		},
		Mutation{
			Name:    "ordering: one endpoint waits for another endpoint's deliveries of the key",
			File:    orderingGo,
			Find:    "WHERE ahead.endpoint_id = %[1]s AND",
			Replace: "WHERE",
			Pkg:     pkg,
			Test:    claimRules,
		},
		Mutation{
			Name:    "ordering: an earlier outbox row of the key not yet fanned out holds nothing",
			File:    orderingGo,
			Find:    "WHERE ob.ordering_key = %[2]s AND ob.status = 'pending'",
			Replace: "WHERE ob.ordering_key = %[2]s AND ob.status = 'never'",
			Pkg:     pkg,
			Test:    "TestOrdering_EarlierOutboxRowHoldsTheKey",
		},
		Mutation{
			Name:    "ordering: a row scheduled for later holds its key until it is due",
			File:    orderingGo,
			Find:    "AND (ob.attempts > 0 OR ob.next_attempt_at <= now())",
			Replace: "",
			Pkg:     pkg,
			Test:    "TestOrdering_EarlierOutboxRowHoldsTheKey",
		},
		Mutation{
			Name:    "ordering: a failed head never holds its key, whatever the endpoint's policy",
			File:    orderingGo,
			Find:    "WHERE o.id = ahead.endpoint_id) = 'block'",
			Replace: "WHERE o.id = ahead.endpoint_id) = 'never'",
			Pkg:     pkg,
			Test:    "TestOrdering_FailedHeadBlocksOrProceeds",
		},
		Mutation{
			Name:    "ordering: skipping a failed head releases nothing",
			File:    orderingGo,
			Find:    "AND ahead.order_skipped_at IS NULL\n",
			Replace: "\n",
			Pkg:     pkg,
			Test:    "TestOrdering_FailedHeadBlocksOrProceeds",
		},
		Mutation{
			Name:    "ordering: the fan-out makes first attempts of events that must wait",
			File:    "webhook/fanout.go",
			Find:    "\t\tOR ` + orderedWaitSQL(\"ep.id\", \"ev.ordering_key\", \"ev.ordering_seq\") + `\n",
			Replace: "\n",
			Pkg:     pkg,
			Test:    "TestOrdering_FanOutHoldsTheLaterEventsOfAKey",
		},
		Mutation{
			Name:    "ordering: the fan-out drops the key on the way to the event",
			File:    "webhook/outbox.go",
			Find:    "SELECT id, event_type, payload, id, traceparent, ordering_key, coalesce(",
			Replace: "SELECT id, event_type, payload, id, traceparent, NULL, coalesce(",
			Pkg:     pkg,
			Test:    "TestOrdering_FanOutHoldsTheLaterEventsOfAKey",
		},
		Mutation{
			Name:    "ordering: a resolved head leaves the next delivery of its key behind the claim window",
			File:    migration,
			Find:    "    UPDATE webhook_deliveries SET next_retry_at = now()\n    WHERE id = (",
			Replace: "    UPDATE webhook_deliveries SET next_retry_at = next_retry_at\n    WHERE id = (",
			Pkg:     pkg,
			Test:    "TestOrdering_ResolvedHeadHandsTheKeyOn",
		},
		Mutation{
			Name:    "ordering: a replay's event has no key",
			File:    "webhook/replay.go",
			Find:    "SELECT event_type, payload, id, ordering_key FROM webhook_events WHERE id = $1",
			Replace: "SELECT event_type, payload, id, NULL FROM webhook_events WHERE id = $1",
			Pkg:     pkg,
			Test:    "TestOrdering_ReplayGoesLastRequeueKeepsItsPlace",
		},
		Mutation{
			Name:    "ordering: a delivered head leaves its key to the retry lane (no hand-on in process)",
			File:    "webhook/attempt.go",
			Find:    "if handOn && d.orderingKey != \"\" && mark.Status == StatusSucceeded {",
			Replace: "if false && handOn && d.orderingKey != \"\" && mark.Status == StatusSucceeded {",
			Pkg:     pkg,
			Test:    "TestOrdering_DeliveredHeadHandsItsKeyOnInProcess",
		},
		Mutation{
			Name:    "ordering: the hand-on takes the key's next delivery while an earlier one still waits",
			File:    "webhook/delivery.go",
			Find:    "\t\t\t\tAND NOT ` + waitsBehindSQL(\"d.endpoint_id\", \"d.ordering_key\", \"d.ordering_seq\", \"m.id\") + `\n",
			Replace: "\n",
			Pkg:     pkg,
			Test:    "TestOrdering_HandOnWaitsForAnEarlierRowNotYetFannedOut",
		},
		Mutation{
			Name:    "ordering: the hand-on waits for the very delivery it follows",
			File:    "webhook/ordering.go",
			Find:    "\"WHERE ahead.id <> \"+resolved+\" AND ahead.endpoint_id\"",
			Replace: "\"WHERE ahead.endpoint_id\"",
			Pkg:     pkg,
			Test:    "TestOrdering_DeliveredHeadHandsItsKeyOnInProcess",
		},
		Mutation{
			Name:    "ordering: a birth that raced the mark ahead of it is not seen as raced (left to the sweep)",
			File:    "webhook/fanout.go",
			Find:    "AND ahead.ordering_seq < born.ordering_seq AND ahead.status <> 'succeeded' AND ahead.xmax <> 0)",
			Replace: "AND ahead.ordering_seq < born.ordering_seq AND ahead.status <> 'succeeded' AND false)",
			Pkg:     pkg,
			Test:    "TestOrdering_BirthRacingTheMarkAheadIsTakenOnceItCommits",
		},
		Mutation{
			Name:    "ordering: a raced birth's unit does not look again",
			File:    "webhook/retry.go",
			Find:    "if !u.d.leased && (!u.d.raced || !u.p.takeRaced(ctx, &u.d)) {",
			Replace: "if !u.d.leased {",
			Pkg:     pkg,
			Test:    "TestOrdering_BirthRacingTheMarkAheadIsTakenOnceItCommits",
		},
		Mutation{
			Name:    "ordering: the look again does not wait for the mark in progress",
			File:    orderingGo,
			Find:    "return orderedWait(endpoint, key, seq, \" FOR SHARE OF ahead\")",
			Replace: "return orderedWait(endpoint, key, seq, \"\")",
			Pkg:     pkg,
			Test:    "TestOrdering_BirthRacingTheMarkAheadIsTakenOnceItCommits",
		},
		Mutation{
			Name:    "ordering: the outbox lanes claim no key's turn (left to the gated retry lane)",
			File:    "webhook/outbox.go",
			Find:    "if free := n - len(c.Units); free > 0 && p.orderedRecently() {",
			Replace: "if free := n - len(c.Units); free > 0 && false {",
			Pkg:     pkg,
			Test:    "TestOrdering_AnyReplicasOutboxLaneTakesAKeysTurn",
		},
		Mutation{
			Name:    "ordering: a replica that fans ordered events out does not note it",
			File:    "webhook/outbox.go",
			Find:    "\t\tif d.orderingKey != \"\" {\n\t\t\tp.sawOrdered()\n\t\t}\n",
			Replace: "",
			Pkg:     pkg,
			Test:    "TestOrdering_AnyReplicasOutboxLaneTakesAKeysTurn",
		},
		Mutation{
			Name:    "ordering: a chain keeps its slot while older ordered work waits",
			File:    "webhook/retry.go",
			Find:    "if u.p.slots.OlderWaits(u.d.orderingSeq) {",
			Replace: "if false && u.p.slots.OlderWaits(u.d.orderingSeq) {",
			Pkg:     pkg,
			Test:    "TestOrdering_ChainLeavesItsSlotToOlderWork",
		},
		Mutation{
			Name:    "ordering: an ordered delivery has no rank (its place in the key) to wait for a slot by",
			File:    "webhook/retry.go",
			Find:    "func (u *attemptUnit) Rank() (int64, bool) { return u.d.orderingSeq, u.d.orderingKey != \"\" }",
			Replace: "func (u *attemptUnit) Rank() (int64, bool) { return u.d.orderingSeq, false }",
			Pkg:     pkg,
			Test:    "TestOrdering_AttemptIsRankedByItsPlace",
		},
	)
}
