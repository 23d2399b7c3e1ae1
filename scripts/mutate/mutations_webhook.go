package main

// Mutations of the webhook pipeline (docs/design/outbox-transport.md:
// detached marks, atomic fan-out, redelivery semantics, retry gating and
// retention), each named with the webhook test that must catch it. The claim
// mutations edit the shared internal/engine/claim code, like the email outbox's
// entries, but name the webhook_outbox drainer's own tests, which pin that
// claim separately.
//
// Each of those two claim tests catches one mechanism, and the other stays
// green: deleting SKIP LOCKED leaves
// TestOutbox_ProcessBatch_ConcurrentClaimersDisjoint green (its second
// dispatcher starts after the first claim committed, so only the rows'
// dispatched status separates them: the claim fans its rows out in the
// same statement, with no lease in between), and leaving the rows pending
// leaves TestOutbox_ProcessBatch_SkipsRowsLockedBySibling green. This
// runner checks the red half.
func init() {
	const (
		claimGo    = "internal/engine/claim/claim.go"
		outboxGo   = "webhook/outbox.go"
		fanoutGo   = "webhook/fanout.go"
		deliveryGo = "webhook/delivery.go"
		attemptGo  = "webhook/attempt.go"
		clientGo   = "webhook/client.go"
		pkg        = "./webhook/"
	)
	register(
		// Claim-lease over webhook_outbox (see
		// docs/design/outbox-transport.md, Claim and lease).
		Mutation{
			Name:    "webhook claim: drop FOR UPDATE SKIP LOCKED",
			File:    claimGo,
			Find:    "\tFOR UPDATE SKIP LOCKED`, t.Name, due, order, limit, t.claimable())",
			Replace: "\t`, t.Name, due, order, limit, t.claimable())",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestClaim_SkipsRowsLockedBySibling",
		},
		Mutation{
			// The first-come claim is the fan-out's row-by-row fallback
			// now: its own test, not the fan-out's.
			Name:    "webhook claim: FOR UPDATE without SKIP LOCKED",
			File:    claimGo,
			Find:    "FOR UPDATE SKIP LOCKED`, t.Name, due, order, limit, t.claimable())",
			Replace: "FOR UPDATE`, t.Name, due, order, limit, t.claimable())",
			Pkg:     "./internal/engine/claim/",
			Test:    "TestClaim_SkipsRowsLockedBySibling",
		},
		Mutation{
			// $2 stays referenced so the statement still runs: only the
			// lease is gone.
			Name:    "webhook claim: the claim's fan-out leaves its rows pending for the next claim",
			File:    outboxGo,
			Find:    "WHEN f.unchecked THEN 'pending' ELSE 'dispatched' END,",
			Replace: "WHEN f.unchecked THEN 'pending' ELSE o.status END,",
			Pkg:     pkg,
			Test:    "TestOutbox_ProcessBatch_ConcurrentClaimersDisjoint",
		},

		// Atomic fan-out, handler owns the mark (see
		// docs/design/outbox-transport.md, Atomic fan-out).
		Mutation{
			Name:    "webhook fan-out: outbox mark outside the fan-out transaction",
			File:    outboxGo,
			Find:    "fan, err := p.fanOutRows(ctx, tx, []string{outboxID}, nil)",
			Replace: "fan, err := p.fanOutRows(ctx, p.pool, []string{outboxID}, nil)",
			Pkg:     pkg,
			Test:    "TestDispatchFromOutbox_AllOrNothing",
		},
		Mutation{
			Name:    "webhook fan-out: the fan-out leaves its row pending",
			File:    outboxGo,
			Find:    "WHEN f.unchecked THEN 'pending' ELSE 'dispatched' END,",
			Replace: "WHEN f.unchecked THEN 'pending' ELSE o.status END,",
			Pkg:     pkg,
			Test:    "TestDispatchFromOutbox_HandlerOwnsMark",
		},
		Mutation{
			Name:    "webhook fan-out: outbox mark without the status = 'pending' guard",
			File:    outboxGo,
			Find:    "WHERE o.id = ANY (ARRAY(` + rows + `)) AND o.status = 'pending'",
			Replace: "WHERE o.id = ANY (ARRAY(` + rows + `))",
			Pkg:     pkg,
			Test:    "TestDispatchFromOutbox_HandlerOwnsMark",
		},
		Mutation{
			Name:    "webhook fan-out: deliveries born unleased (next_retry_at NULL)",
			File:    fanoutGo,
			Find:    "THEN now() ELSE now() + ` + lease + `::interval END,",
			Replace: "THEN now() ELSE NULL::timestamptz + 0 * ` + lease + `::interval END,",
			Pkg:     pkg,
			Test:    "TestDispatchFromOutbox_BornLeased",
		},
		Mutation{
			Name:    "webhook fan-out: deliveries born due at once (next_retry_at now())",
			File:    fanoutGo,
			Find:    "THEN now() ELSE now() + ` + lease + `::interval END,",
			Replace: "THEN now() ELSE now() + 0 * ` + lease + `::interval END,",
			Pkg:     pkg,
			Test:    "TestDispatchFromOutbox_BornLeased",
		},
		Mutation{
			Name:    "webhook fan-out: ignore endpoints' event type filters",
			File:    fanoutGo,
			Find:    "cardinality(ep.event_types) = 0 OR ev.event_type = ANY (ep.event_types)",
			Replace: "true",
			Pkg:     pkg,
			Test:    "TestDispatchFromOutbox_BornLeased",
		},
		Mutation{
			Name:    "webhook fan-out: deliver to disabled endpoints",
			File:    fanoutGo,
			Find:    "reachesSQL = sameTenantSQL + ` AND ep.enabled AND CASE",
			Replace: "reachesSQL = sameTenantSQL + ` AND true AND CASE",
			Pkg:     pkg,
			Test:    "TestDispatchFromOutbox_BornLeased",
		},

		// CAS marks (see docs/design/outbox-transport.md, Detached marks).
		Mutation{
			Name:    "webhook Mark: drop the status = 'pending' guard",
			File:    "webhook/mark.go",
			Find:    "\tWHERE id = $1 AND status = 'pending'\n\tRETURNING id, endpoint_id, ordering_key, ordering_seq",
			Replace: "\tWHERE id = $1\n\tRETURNING id, endpoint_id, ordering_key, ordering_seq",
			Pkg:     pkg,
			Test:    "TestMark_DropsStaleFailureMarkAfterSiblingSuccess",
		},
		Mutation{
			Name:    "webhook Mark: mark on the caller's context, not detached",
			File:    claimGo,
			Find:    "mctx, cancel := MarkContext(ctx)",
			Replace: "mctx, cancel := context.WithCancel(ctx)",
			Pkg:     pkg,
			Test:    "TestMark_RecordsOnCancelledContext",
		},
		Mutation{
			Name:    "webhook attempt: stale delivery mark not counted",
			File:    "internal/engine/record.go", // engine.Record, which webhook's record calls
			Find:    `r.Metrics.Stale(r.Outbox)`,
			Replace: `_ = r.Outbox`,
			Pkg:     pkg,
			Test:    "TestAttempt_StaleMarkIsCountedNotApplied",
		},

		// First attempts in process, inside the birth lease.
		Mutation{
			Name:    "webhook attempt: start first attempts that would outlive the birth lease",
			File:    attemptGo,
			Find:    "return d.leaseEnd.Add(-(p.lc.DeliveryBudget + leases.MarkTimeout))",
			Replace: "return d.leaseEnd.Add(leases.MarkTimeout + time.Hour)",
			Pkg:     pkg,
			Test:    "TestProcessBatch_DefersAttemptsThatWouldOutliveTheBirthLease",
		},
		Mutation{
			Name:    "webhook attempt: deliveries with no slot in their lease not released to the retry worker",
			File:    "webhook/unit.go",
			Find:    "return u.release(ctx, \"no attempt slot within the lease, or stopping: left to the retry worker\")",
			Replace: "return Tally{}",
			Pkg:     pkg,
			Test:    "TestLane_AttemptWithNoSlotInItsLeaseIsReleased",
		},

		Mutation{
			Name:    "webhook stop: claims go on after Stop",
			File:    "internal/engine/lane.go",
			Find:    "\tdefer context.AfterFunc(l.stopCtx, cancel)()\n\t// Claimed units beyond",
			Replace: "\t// Claimed units beyond",
			Pkg:     pkg,
			Test:    "TestPipeline_StopClaimsNothingMore",
		},

		// Retry worker (see docs/design/outbox-transport.md, Retry gating)
		// and the legacy branch (Deliveries written before leases).
		Mutation{
			Name:    "webhook retry: drop the legacy NULL next_retry_at branch",
			File:    "webhook/retry.go",
			Find:    "LegacyNullDue: true,",
			Replace: "LegacyNullDue: false,",
			Pkg:     pkg,
			Test:    "TestRetry_ClaimsLegacyNullNextRetryAt",
		},
		Mutation{
			Name:    "webhook attempt: attempts unbounded (schedule never spent)",
			File:    attemptGo,
			Find:    "Counted: m.Attempt, Backoff: p.schedule})",
			Replace: "Counted: min(m.Attempt, len(p.schedule)), Backoff: p.schedule})",
			Pkg:     pkg,
			Test:    "TestRetry_TransientFailuresEndInFailed",
		},
		Mutation{
			Name:    "webhook attempt: disabled endpoint still sent to",
			File:    attemptGo,
			Find:    "case !d.enabled:",
			Replace: "case !d.enabled && false:",
			Pkg:     pkg,
			Test:    "TestRetry_DisabledEndpointHeldUntilEnabled",
		},

		// Standard Webhooks signing.
		Mutation{
			Name:    "webhook sign: webhook-id is the delivery, not the event (unstable across endpoints and replays)",
			File:    attemptGo,
			Find:    "req.Header.Set(HeaderID, d.eventID)",
			Replace: "req.Header.Set(HeaderID, d.id)",
			Pkg:     pkg,
			Test:    "TestRetry_FreshTimestampStableID",
		},
		Mutation{
			Name:    "webhook sign: id left out of the signed content",
			File:    "webhook/sign.go",
			Find:    "\tmac.Write([]byte(msgID))\n",
			Replace: "",
			Pkg:     pkg,
			Test:    "TestDelivery_SignatureVerifiedByReferenceLibrary",
		},

		// HTTP delivery rules.
		Mutation{
			Name:    "webhook client: follow redirects",
			File:    clientGo,
			Find:    "return http.ErrUseLastResponse",
			Replace: "return nil",
			Pkg:     pkg,
			Test:    "TestDelivery_RedirectNotFollowed",
		},
		Mutation{
			Name:    "webhook client: drop the SSRF check",
			File:    "webhook/ssrf.go",
			Find:    "return p.check(ap.Addr())",
			Replace: "_ = ap\n\treturn nil",
			Pkg:     pkg,
			Test:    "TestDelivery_SSRFRefusedWithoutAllowlist",
		},
		Mutation{
			Name:    "webhook attempt: SSRF refusal retried instead of failed",
			File:    attemptGo,
			Find:    "if errors.Is(err, ErrForbiddenAddress) {",
			Replace: "if errors.Is(err, ErrForbiddenAddress) && false {",
			Pkg:     pkg,
			Test:    "TestDelivery_SSRFRefusedWithoutAllowlist",
		},
		Mutation{
			Name:    "webhook client: drop the 4 KiB excerpt cap",
			File:    clientGo,
			Find:    "s, _ := pgtext.Clean(string(b), maxExcerptBytes)",
			Replace: "s, _ := pgtext.Clean(string(b), 1<<30)",
			Pkg:     pkg,
			Test:    "TestDelivery_ResponseExcerptCapped",
		},
		Mutation{
			Name:    "webhook attempt: 410 Gone does not disable the endpoint",
			File:    attemptGo,
			Find:    "endpoint disabled\"\n\t\treturn m, classed{class: engine.Permanent}, true",
			Replace: "endpoint disabled\"\n\t\treturn m, classed{class: engine.Permanent}, false",
			Pkg:     pkg,
			Test:    "TestDelivery_GoneDisablesEndpoint",
		},
		Mutation{
			Name:    "webhook attempt: Retry-After ignored",
			File:    attemptGo,
			Find:    "c = classed{class: engine.NamedWait, wait: wait}",
			Replace: "c = classed{class: engine.Transient, wait: wait}",
			Pkg:     pkg,
			Test:    "TestDelivery_RetryAfterHonoured",
		},
		Mutation{
			Name:    "webhook schedule: Retry-After not clamped",
			File:    "webhook/backoff.go",
			Find:    "return min(max(wait, MinRetryAfter), MaxRetryAfter), true",
			Replace: "return wait, true",
			Pkg:     pkg,
			Test:    "TestRetryAfter",
		},
		Mutation{
			Name:    "webhook attempt: plain http sent in production",
			File:    attemptGo,
			Find:    "case checkEndpointURL(d.url, p.cfg.Production) != nil:",
			Replace: "case checkEndpointURL(d.url, false) != nil:",
			Pkg:     pkg,
			Test:    "TestDelivery_ProductionRefusesPlainHTTP",
		},

		// Enqueue and endpoints.
		Mutation{
			Name:    "webhook enqueue: no payload size limit",
			File:    "webhook/enqueue.go",
			Find:    "if len(payload) > limit {",
			Replace: "if len(payload) > limit && false {",
			Pkg:     pkg,
			Test:    "TestEnqueue",
		},
		Mutation{
			Name:    "webhook enqueue: no JSON validation",
			File:    "webhook/enqueue.go",
			Find:    "if !json.Valid(payload) {",
			Replace: "if !json.Valid(payload) && false {",
			Pkg:     pkg,
			Test:    "TestEnqueue",
		},
		Mutation{
			Name:    "webhook endpoints: http accepted in production",
			File:    "webhook/endpoint.go",
			Find:    `case production && u.Scheme != "https":`,
			Replace: `case production && u.Scheme == "never":`,
			Pkg:     pkg,
			Test:    "TestCreateEndpoint_Refuses",
		},

		// Replay (see docs/design/outbox-transport.md, Atomic fan-out) and
		// pruning (see docs/design/outbox-transport.md, Retention).
		Mutation{
			Name:    "webhook replay: interrupted clone not reused",
			File:    "webhook/replay.go",
			Find:    "WHERE c.replay_of = $1 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = c.id)",
			Replace: "WHERE false AND c.replay_of = $1",
			Pkg:     pkg,
			Test:    "TestReplayEvent",
		},
		Mutation{
			Name:    "webhook replay: settled families replayed again",
			File:    "webhook/replay.go",
			Find:    "AND fd.status IN ('pending', 'succeeded'))",
			Replace: "AND false)",
			Pkg:     pkg,
			Test:    "TestReplayFailedSince",
		},
		Mutation{
			Name:    "webhook replay: clone of a clone (families not flat)",
			File:    "webhook/replay.go",
			Find:    "`SELECT coalesce(replay_of, id) FROM webhook_events WHERE id = $1`",
			Replace: "`SELECT id FROM webhook_events WHERE id = $1`",
			Pkg:     pkg,
			Test:    "TestReplayEvent",
		},
		Mutation{
			Name:    "webhook prune: pending and failed rows deleted too",
			File:    "webhook/prune.go",
			Find:    "WHERE status = 'dispatched' AND dispatched_at < now() - $1::interval",
			Replace: "WHERE coalesce(dispatched_at, created_at) < now() - $1::interval",
			Pkg:     pkg,
			Test:    "TestPrune_OnlyDispatchedOutboxRowsPastRetention",
		},
		Mutation{
			Name:    "webhook prune: retention ignored",
			File:    "webhook/prune.go",
			Find:    "dispatched_at < now() - $1::interval",
			Replace: "dispatched_at < now() + 0 * $1::interval",
			Pkg:     pkg,
			Test:    "TestPrune_OnlyDispatchedOutboxRowsPastRetention",
		},

		// Issue 13 point 4: a receiver's error text is capped for the log
		// lines and the Tally too, not only for the stored columns. The
		// attempt path caps before the Tally sees the text, so the Tally's
		// own cap has its own test.
		Mutation{
			Name:    "webhook attempt: the error text logged uncapped",
			File:    "webhook/attempt.go",
			Find:    "\tmark.Error = pgtext.LastError(mark.Error)\n",
			Replace: "\t_ = pgtext.LastError\n",
			Pkg:     pkg,
			Test:    "TestDelivery_HugeRedirectErrorTextCapped",
		},
		Mutation{
			Name:    "engine tally: error texts kept uncapped",
			File:    "internal/engine/tally.go",
			Find:    "\tmsg = pgtext.LastError(msg)\n",
			Replace: "\t_ = pgtext.LastError\n",
			Pkg:     "./internal/engine/",
			Test:    "TestTally_ErrorsCapped",
		},
		// Issue 13 point 9: the webhook_outbox failure mark is a CAS too,
		// and a mark that matched nothing is stale, not "will retry".
		Mutation{
			Name:    "webhook outbox: failure mark without its status = 'pending' guard",
			File:    "webhook/outbox.go",
			Find:    "ELSE next_attempt_at END\nWHERE id = $1 AND status = 'pending'`",
			Replace: "ELSE next_attempt_at END\nWHERE id = $1`",
			Pkg:     pkg,
			Test:    "TestOutboxFailureMark_StaleIsDroppedNotRetried",
		},
		Mutation{
			Name:    "webhook outbox: failure mark ignores rows affected",
			File:    "webhook/outbox.go",
			Find:    "\tcase tag.RowsAffected() == 0:\n\t\tt = Tally{Stale: 1}",
			Replace: "\tcase false && tag.RowsAffected() == 0:\n\t\tt = Tally{Stale: 1}",
			Pkg:     pkg,
			Test:    "TestOutboxFailureMark_StaleIsDroppedNotRetried",
		},
		Mutation{
			Name:    "requeue delivery: any state is put back to pending",
			File:    "webhook/requeue.go",
			Find:    "leased_until = NULL, last_error = NULL, order_skipped_at = NULL\nWHERE id = $1 AND status = 'failed'",
			Replace: "leased_until = NULL, last_error = NULL, order_skipped_at = NULL\nWHERE id = $1",
			Pkg:     pkg,
			Test:    "TestRequeueDelivery",
		},
		Mutation{
			Name:    "requeue delivery: the attempt budget is not reset",
			File:    "webhook/requeue.go",
			Find:    "SET status = 'pending', attempts = 0, next_retry_at = now(),",
			Replace: "SET status = 'pending', next_retry_at = now(),",
			Pkg:     pkg,
			Test:    "TestRequeueDelivery",
		},

		// River wiring.

	)
}
