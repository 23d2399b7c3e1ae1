package main

// Mutations of what a release and a deployment rely on: the dependency
// license check (scripts/licenses), the version stamp the Dockerfile links
// in, the Kubernetes manifests and the Grafana dashboard.
func init() {
	register(
		Mutation{
			Name:    "release: the license check refuses only forbidden licenses (an unknown one passes)",
			File:    "scripts/licenses",
			Find:    `--allowed_licenses="$allowed"`,
			Replace: `--disallowed_types=forbidden`,
			Pkg:     "./scripts/",
			Test:    "TestLicenses_RefusesWhatIsNotAllowed",
		},
	)
}
