package main

// Mutations of what a team adopting postbox met first: localhost admitted
// by the IPv4 CIDR it resolves under, a long canceller's name cut as the
// email side cuts it, a replay sent only where its original went. Each
// names the test that must turn red.
func init() {
	register(
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
