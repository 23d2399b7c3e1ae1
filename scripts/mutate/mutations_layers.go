package main

// Mutations of the layers: a package of the engine tier that imports one
// above it is an arrow back up (docs/layers_test.go).
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
	)
}
