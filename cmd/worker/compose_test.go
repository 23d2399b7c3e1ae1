package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// composeFile is the part of docker-compose.yml the checks below read.
type composeFile struct {
	Services map[string]struct {
		Image           string            `yaml:"image"`
		Build           any               `yaml:"build"`
		Environment     map[string]string `yaml:"environment"`
		Secrets         []string          `yaml:"secrets"`
		Ports           []string          `yaml:"ports"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
		Healthcheck     struct {
			Test    []string `yaml:"test"`
			Disable bool     `yaml:"disable"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Secrets map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
}

// TestComposeFile checks docker-compose.yml's deployment properties where
// no Docker runs (CI): images pinned by exact tag, no inline passwords
// (compose secrets and *_FILE variables), ports on 127.0.0.1 only and
// Postgres off 5432, one image built once, a stop grace period covering
// SHUTDOWN_TIMEOUT and the shutdown after it, and a readiness healthcheck. The schema itself is
// TestComposeFile_ValidatesAgainstTheSchema's.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"postgres", "mailpit", "migrate", "worker"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("no %s service", name)
		}
	}
	exactTag := regexp.MustCompile(`^[\w./-]+:v?\d+\.\d+(\.\d+)?[\w.-]*(@sha256:[0-9a-f]{64})?$`)
	for name, s := range c.Services {
		if name != "migrate" && name != "worker" && !exactTag.MatchString(s.Image) {
			t.Errorf("%s: image %q is not pinned to an exact version tag", name, s.Image)
		}
		for k, v := range s.Environment {
			if strings.Contains(k, "PASSWORD") && !strings.HasSuffix(k, "_FILE") {
				t.Errorf("%s: %s=%q is an inline password; use %s_FILE and a secret", name, k, v, k)
			}
			if strings.HasSuffix(k, "_FILE") && strings.HasPrefix(v, "/run/secrets/") &&
				!slices.Contains(s.Secrets, strings.TrimPrefix(v, "/run/secrets/")) {
				t.Errorf("%s: %s=%s but the service does not mount that secret", name, k, v)
			}
			if k == "DATABASE_URL" && strings.Contains(v, "@") {
				t.Errorf("%s: DATABASE_URL carries credentials inline; use DATABASE_URL_FILE", name)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %q is published on every interface", name, p)
			}
			if strings.HasPrefix(p, "127.0.0.1:5432:") {
				t.Errorf("%s: port %q collides with a local Postgres", name, p)
			}
		}
		for _, sec := range s.Secrets {
			if c.Secrets[sec].File == "" {
				t.Errorf("%s: secret %s is not defined with a file", name, sec)
			}
		}
	}
	if pg := c.Services["postgres"]; pg.Environment["POSTGRES_PASSWORD_FILE"] == "" {
		t.Error("postgres: no POSTGRES_PASSWORD_FILE")
	}

	migrate, worker := c.Services["migrate"], c.Services["worker"]
	if migrate.Build == nil || migrate.Image == "" || worker.Image != migrate.Image || worker.Build != nil {
		t.Errorf("the image is not built once: migrate build %v image %q, worker build %v image %q",
			migrate.Build, migrate.Image, worker.Build, worker.Image)
	}
	if b, ok := migrate.Build.(map[string]any); !ok || b["args"].(map[string]any)["VERSION"] == nil {
		t.Errorf("migrate's build does not pass the VERSION build argument: %v", migrate.Build)
	}
	grace, err := time.ParseDuration(worker.StopGracePeriod)
	shutdown, err2 := time.ParseDuration(worker.Environment["SHUTDOWN_TIMEOUT"])
	if err != nil || err2 != nil || grace < shutdown+hardStopTimeout+httpShutdownTimeout {
		t.Errorf("worker: stop_grace_period %q must cover SHUTDOWN_TIMEOUT %q, the hard stop's %s and the HTTP close's %s",
			worker.StopGracePeriod, worker.Environment["SHUTDOWN_TIMEOUT"], hardStopTimeout, httpShutdownTimeout)
	}
	if hc := strings.Join(worker.Healthcheck.Test, " "); !strings.HasSuffix(hc, "worker healthcheck") {
		t.Errorf("worker: healthcheck %q does not probe readiness (worker healthcheck)", hc)
	}
}

// TestDockerBuild checks the Dockerfile stamps the version where `worker
// version` reads it, and that the build context leaves .git out.
func TestDockerBuild(t *testing.T) {
	t.Parallel()
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ARG VERSION", "-X github.com/postbox/postbox/internal/engine/version.stamp=${VERSION}",
		`CMD ["/usr/local/bin/worker", "healthcheck"]`} {
		if !strings.Contains(string(df), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?m)^FROM \S+:(latest|\d+)(-\w+)? `).Match(df) {
		t.Error("Dockerfile's build image is not pinned to an exact version")
	}
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", "secrets", "docs"} {
		if !slices.Contains(strings.Fields(string(ignore)), want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}
