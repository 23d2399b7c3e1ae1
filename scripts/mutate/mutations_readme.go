package main

// Mutations of the README's runnable parts: its Go example is the compiled
// example's code (docs/readme_test.go), and its quick start runs as
// written (docs/quickstart_test.go).
func init() {
	register(
		Mutation{
			Name:    "readme: the compiled Go example drifts from the README's copy",
			File:    "outbox/example_readme_test.go",
			Find:    `Subject:          "Reset your password",`,
			Replace: `Subject:          "Reset your password now",`,
			Pkg:     "./docs/",
			Test:    "TestReadme_GoExamplesAreCompiled",
		},
		Mutation{
			Name:    "readme: the quick start's worker run loses SMTP_TLS=none, so Mailpit gets STARTTLS",
			File:    "README.md",
			Find:    "SMTP_HOST=localhost SMTP_PORT=1025 SMTP_TLS=none go run ./cmd/worker run &",
			Replace: "SMTP_HOST=localhost SMTP_PORT=1025 go run ./cmd/worker run &",
			Pkg:     "./docs/",
			Test:    "TestQuickStart",
		},
	)
}
