package main

// Mutations of what a release and a deployment rely on: the dependency
// license check (scripts/licenses), the version stamp the Dockerfile links
// in, the Kubernetes manifests, the Grafana dashboard, and the
// performance page's summary.
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
		Mutation{
			Name:    "release: the Dockerfile stamps the revision into a variable that does not exist",
			File:    "Dockerfile",
			Find:    "internal/engine/version.stampRevision=${REVISION}",
			Replace: "internal/engine/version.revision=${REVISION}",
			Pkg:     "./cmd/worker/",
			Test:    "TestVersion_StampedByTheDockerfilesLdflags",
		}, Mutation{
			Name:    "deploy: the pod's grace period ends inside the worker's drain",
			File:    "deploy/kubernetes/worker.yaml",
			Find:    "terminationGracePeriodSeconds: 60",
			Replace: "terminationGracePeriodSeconds: 40",
			Pkg:     "./cmd/worker/",
			Test:    "TestKubernetesManifests",
		},
		Mutation{
			Name:    "deploy: the hard stop after SHUTDOWN_TIMEOUT outgrows the pod's grace period",
			File:    "cmd/worker/run.go",
			Find:    "hardStopTimeout     = 15 * time.Second",
			Replace: "hardStopTimeout     = 45 * time.Second",
			Pkg:     "./cmd/worker/",
			Test:    "TestKubernetesManifests",
		},
		Mutation{
			Name:    "deploy: the readiness probe asks a path the worker does not serve",
			File:    "deploy/kubernetes/worker.yaml",
			Find:    "path: /readyz",
			Replace: "path: /ready",
			Pkg:     "./cmd/worker/",
			Test:    "TestKubernetesManifests",
		},
		Mutation{
			Name:    "deploy: a misspelt field in the Deployment",
			File:    "deploy/kubernetes/worker.yaml",
			Find:    "readOnlyRootFilesystem: true",
			Replace: "readOnlyRootFileSystem: true",
			Pkg:     "./cmd/worker/",
			Test:    "TestKubernetesManifests",
		},
		Mutation{
			Name:    "deploy: the migration Job lacks a secret the worker's configuration needs",
			File:    "deploy/kubernetes/migrate-job.yaml",
			Find:    "            - name: RIVERUI_PASSWORD_FILE\n              value: /run/secrets/postbox/riverui_password\n",
			Replace: "",
			Pkg:     "./cmd/worker/",
			Test:    "TestKubernetesManifests",
		},
		Mutation{
			Name:    "deploy: a dashboard panel queries a metric the code does not register",
			File:    "deploy/grafana/postbox.json",
			Find:    "max by (outbox) (postbox_outbox_failed)",
			Replace: "max by (outbox) (postbox_outbox_failures)",
			Pkg:     "./deploy/grafana/",
			Test:    "TestDashboard",
		},
		Mutation{
			Name:    "deploy: no dashboard panel shows a metric an alert reads",
			File:    "deploy/grafana/postbox.json",
			Find:    "max(postbox_webhook_ordered_keys_blocked)",
			Replace: "max(postbox_webhook_in_flight)",
			Pkg:     "./deploy/grafana/",
			Test:    "TestDashboard",
		},
		Mutation{
			Name:    "deploy: a histogram's _bucket series passes for any metric name",
			File:    "internal/tooling/testsupport/metricnames/metricnames.go",
			Find:    "ok && registered[base]",
			Replace: "ok && (registered[base] || suffix != \"\")",
			Pkg:     "./deploy/grafana/",
			Test:    "TestDashboard",
		},
		Mutation{
			Name:    "docs: the performance summary cites a section the page does not have",
			File:    "docs/PERFORMANCE.md",
			Find:    "[The same backlog with the email attempt log](#the-same-backlog-with-the-email-attempt-log)",
			Replace: "[The same backlog with the email attempt log](#the-same-backlog-with-the-attempt-log)",
			Pkg:     "./docs/",
			Test:    "TestPerformance_SummaryFirstAndCitesItsSections",
		},
		Mutation{
			Name:    "docs: the performance summary no longer comes first",
			File:    "docs/PERFORMANCE.md",
			Find:    "## Summary: current figures and sizing rules",
			Replace: "## Current figures and sizing rules",
			Pkg:     "./docs/",
			Test:    "TestPerformance_SummaryFirstAndCitesItsSections",
		},
		Mutation{
			Name:    "docs: heading anchors drop underscores, unlike GitHub's",
			File:    "internal/tooling/testsupport/markdown/markdown.go",
			Find:    "case r == '-' || r == '_' ||",
			Replace: "case r == '-' ||",
			Pkg:     "./docs/",
			Test:    "TestPerformance_SummaryFirstAndCitesItsSections",
		},
		Mutation{
			Name:    "deploy: compose kills the worker inside its drain",
			File:    "docker-compose.yml",
			Find:    "stop_grace_period: 60s",
			Replace: "stop_grace_period: 45s",
			Pkg:     "./cmd/worker/",
			Test:    "TestComposeFile",
		},
	)
}
