package main

// Mutations of what a team adopting postbox met first: localhost admitted
// by the IPv4 CIDR it resolves under, a long canceller's name cut as the
// email side cuts it, a replay sent only where its original went. Each
// names the test that must turn red.
func init() {
	register(
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
