package main

// Mutations of what a team adopting postbox met first: localhost admitted
// by the IPv4 CIDR it resolves under, a long canceller's name cut as the
// email side cuts it, a replay sent only where its original went, errors
// that say each prefix once, rotate-secret --json. Each names the test that
// must turn red.
func init() {
	register(
		Mutation{
			Name:    "webhook rotate-secret: an unknown endpoint's not-found wrapped again (webhook: … webhook: not found)",
			File:    "webhook/secrets.go",
			Find:    "case errors.Is(err, ErrNotFound):",
			Replace: "case false && errors.Is(err, ErrNotFound):",
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
			Find:    "who, _ = pgtext.Clean(who, maxActor)",
			Replace: "who = who[:min(len(who), maxActor)]; _ = pgtext.Clean",
			Pkg:     "./webhook/",
			Test:    "TestCancel_LongWhoCutOnARuneBoundary",
		},
	)
}
