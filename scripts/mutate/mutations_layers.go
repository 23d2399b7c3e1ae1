package main

// Mutations of the layers and of the row's walk: a package of the engine
// tier that imports one above it is an arrow back up (docs/layers_test.go);
// a walk step no earlier step calls no longer reads forward
// (docs/walk_test.go).
func init() {
	register(
		Mutation{
			Name:    "layers: the engine tier imports an operator package",
			File:    "internal/engine/version/metric.go",
			Find:    `import "github.com/prometheus/client_golang/prometheus"`,
			Replace: "import (\n\t\"github.com/prometheus/client_golang/prometheus\"\n\n\t_ \"github.com/postbox/postbox/internal/operator/devserver/smtpsink\"\n)",
			Pkg:     "./docs/",
			Test:    "TestLayers_NoImportRunsBackUp",
		},
		Mutation{
			Name:    "walk: the email walk names a step nothing before it calls",
			File:    "docs/ARCHITECTURE.md",
			Find:    "| `outbox/batch.go` | `batch.count` |",
			Replace: "| `outbox/batch.go` | `batch.Panicked` |",
			Pkg:     "./docs/",
			Test:    "TestArchitecture_WalkIsTrue",
		},
		Mutation{
			Name:    "walk: the webhook walk names a function its file does not declare",
			File:    "docs/ARCHITECTURE.md",
			Find:    "| `webhook/mark.go` | `deliveryMark` |",
			Replace: "| `webhook/attempt.go` | `deliveryMark` |",
			Pkg:     "./docs/",
			Test:    "TestArchitecture_WalkIsTrue",
		},
	)
}
