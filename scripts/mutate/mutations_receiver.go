package main

// The receiver's side of webhooks: webhook.Verify refuses a replayed or
// forged request, and still finds the matching signature among several.
func init() {
	register(
		Mutation{
			Name:    "receiver: Verify skips the timestamp tolerance check",
			File:    "webhook/verify.go",
			Find:    "if err := v.checkTime(time.Unix(secs, 0)); err != nil {",
			Replace: "if err := v.checkTime(time.Unix(secs, 0)); false && err != nil {",
			Pkg:     "./webhook/",
			Test:    "TestVerify",
		},
		Mutation{
			Name:    "receiver: Verify checks only the first signature, so a rotation's second secret is refused",
			File:    "webhook/verify.go",
			Find:    "for s := range strings.SplitSeq(sigs, \" \") {",
			Replace: "for _, s := range strings.Split(sigs, \" \")[:1] {",
			Pkg:     "./webhook/",
			Test:    "TestVerify",
		},
		Mutation{
			Name:    "receiver: Verify accepts any v1 entry without comparing it",
			File:    "webhook/verify.go",
			Find:    "if hmac.Equal([]byte(s), want) {",
			Replace: "if hmac.Equal([]byte(s), want) || strings.HasPrefix(s, \"v1,\") {",
			Pkg:     "./webhook/",
			Test:    "TestVerify",
		},
	)
}
