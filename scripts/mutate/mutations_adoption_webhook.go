package main

// Mutations of what a team adopting postbox met first: localhost admitted
// by the IPv4 CIDR it resolves under, a long canceller's name cut as the
// email side cuts it, a replay sent only where its original went, errors
// that say each prefix once, rotate-secret --json. Each names the test that
// must turn red.
func init() {
	const dropAddressing = "coalesce($2::uuid, ` + addressedSQL(\"o\") + `) AS target"
	register(
		Mutation{
			Name:    "webhook replay: an addressed event is replayed to every subscribed endpoint",
			File:    "webhook/fanout.go",
			Find:    dropAddressing,
			Replace: "$2::uuid AS target",
			Pkg:     "./webhook/",
			Test:    "TestReplayEvent_GoesWhereTheOriginalWent",
		},
		Mutation{
			Name:    "worker replay event: an addressed event is replayed to every subscribed endpoint",
			File:    "webhook/fanout.go",
			Find:    dropAddressing,
			Replace: "$2::uuid AS target",
			Pkg:     "./cmd/worker/",
			Test:    "TestReplayEvent_AddressedEventReachesItsEndpointOnly",
		},
		Mutation{
			Name:    "webhook fan-out: the event keeps no addressing (a replay after the prune goes everywhere)",
			File:    "webhook/outbox.go",
			Find:    "coalesce(ordering_seq, nextval('postbox_ordering_seq')), endpoint_id, tenant_id FROM claimed",
			Replace: "coalesce(ordering_seq, nextval('postbox_ordering_seq')), NULL, tenant_id FROM claimed",
			Pkg:     "./webhook/",
			Test:    "TestReplayEvent_GoesWhereTheOriginalWent",
		},
		Mutation{
			Name:    "webhook replay: an event fanned out before 00029 forgets its kept outbox row's addressing",
			File:    "webhook/fanout.go",
			Find:    "return `coalesce(` + e + `.endpoint_id, (SELECT a.endpoint_id FROM webhook_outbox a WHERE a.id = ` + e + `.outbox_id))`",
			Replace: "return e + `.endpoint_id`",
			Pkg:     "./webhook/",
			Test:    "TestReplayEvent_GoesWhereTheOriginalWent",
		},
		Mutation{
			Name:    "webhook replay: ReplayTargets lists every subscribed endpoint for an addressed event",
			File:    "webhook/replay.go",
			Find:    "(SELECT o.event_type, o.tenant_id, ` + addressedSQL(\"o\") + ` AS target FROM webhook_events o WHERE o.id = $1)",
			Replace: "(SELECT o.event_type, o.tenant_id, NULL::uuid AS target FROM webhook_events o WHERE o.id = $1)",
			Pkg:     "./webhook/",
			Test:    "TestReplayEvent_GoesWhereTheOriginalWent",
		},
		Mutation{
			Name:    "console: the replay's confirmation lists no endpoint it reaches",
			File:    "internal/operator/console/actions.go",
			Find:    "view.Reaches = true",
			Replace: "view.Reaches = false",
			Pkg:     "./internal/operator/console/",
			Test:    "TestReplayEvent_ConfirmListsWhereItGoes",
		},
		Mutation{
			Name:    "console: Replay this event goes to every subscribed endpoint",
			File:    "webhook/fanout.go",
			Find:    dropAddressing,
			Replace: "$2::uuid AS target",
			Pkg:     "./internal/operator/console/",
			Test:    "TestReplayEvent_ConfirmListsWhereItGoes",
		},
		Mutation{
			Name:    "webhook rotate-secret: an unknown endpoint's not-found wrapped again (webhook: … webhook: not found)",
			File:    "webhook/secrets.go",
			Find:    "case errors.Is(err, ErrNotFound):",
			Replace: "case false && errors.Is(err, ErrNotFound):",
			Pkg:     "./cmd/worker/",
			Test:    "TestCommandErrors_SayEachPrefixOnce",
		},
		Mutation{
			Name:    "worker flags: a bad --since names the flag twice (for flag --since: --since …)",
			File:    "cmd/worker/flags.go",
			Find:    "return errors.New(strings.TrimPrefix(err.Error(), fmt.Sprintf(\"--since %q: \", s)))",
			Replace: "_ = strings.TrimPrefix\n\t\treturn err",
			Pkg:     "./cmd/worker/",
			Test:    "TestCommandErrors_SayEachPrefixOnce",
		},
		Mutation{
			Name:    "render: the renderer's error says render: before the dispatcher's render: (render: render:)",
			File:    "outbox/render.go",
			Find:    `permanent(fmt.Errorf("kind %q is not built in`,
			Replace: `permanent(fmt.Errorf("render: kind %q is not built in`,
			Pkg:     "./outbox/",
			Test:    "TestDispatcher_UnknownKindFailsPermanentlyNamingIt",
		},
		Mutation{
			Name:    "endpoints rotate-secret: --json accepted but the text printed",
			File:    "cmd/worker/endpoints.go",
			Find:    "if *asJSON {\n\t\t\t\t\treturn writeJSON(env.Stdout, r)",
			Replace: "if false && *asJSON {\n\t\t\t\t\treturn writeJSON(env.Stdout, r)",
			Pkg:     "./cmd/worker/",
			Test:    "TestEndpointsLimitRotateList",
		},
		Mutation{
			Name:    "webhook ssrf: an IPv4 CIDR does not admit the IPv4-mapped address (localhost refused)",
			File:    "webhook/ssrf.go",
			Find:    "if p.admits(addr) || addr.Is4In6() && p.admits(addr.Unmap()) {",
			Replace: "if p.admits(addr) {",
			Pkg:     "./webhook/",
			Test:    "TestAddressPolicy_MappedAddressMeetsIPv4CIDRs",
		},
		Mutation{
			Name:    "webhook ssrf: a mapped address's refusal names its mapped form, which the CIDR advice cannot use",
			File:    "webhook/ssrf.go",
			Find:    "a := e.Addr.Unmap()",
			Replace: "a := e.Addr",
			Pkg:     "./webhook/",
			Test:    "TestAddressPolicy_MappedAddressMeetsIPv4CIDRs",
		},
		Mutation{
			Name:    "webhook ssrf: a mapped address is admitted as its IPv4 form whatever the allowlist",
			File:    "webhook/ssrf.go",
			Find:    "if p.admits(addr) || addr.Is4In6() && p.admits(addr.Unmap()) {",
			Replace: "if p.admits(addr) || addr.Is4In6() && (p.admits(addr.Unmap()) || len(p.allowed) > 0) {",
			Pkg:     "./webhook/",
			Test:    "TestAddressPolicy_MappedAddressMeetsIPv4CIDRs",
		},
		Mutation{
			Name:    "webhook cancel: who cut by bytes (mid-rune, invalid UTF-8)",
			File:    "webhook/cancel.go",
			Find:    "who = pgtext.Actor(who)",
			Replace: "who = who[:min(len(who), pgtext.MaxActor)]",
			Pkg:     "./webhook/",
			Test:    "TestCancel_LongWhoCutOnARuneBoundary",
		},
	)
}
