package main

import (
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// TestComposeFile_ValidatesAgainstTheSchema is `docker compose config`
// without Docker: compose-go, the library Docker Compose itself loads
// files with, parses docker-compose.yml, interpolates it and validates it
// against the Compose specification's schema.
func TestComposeFile_ValidatesAgainstTheSchema(t *testing.T) {
	t.Parallel()
	opts, err := cli.NewProjectOptions([]string{"../../docker-compose.yml"},
		cli.WithName("postbox"), cli.WithWorkingDirectory("../.."), cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("docker-compose.yml does not validate: %v", err)
	}
	for _, name := range []string{"postgres", "worker"} {
		if _, err := project.GetService(name); err != nil {
			t.Errorf("service %s: %v", name, err)
		}
	}
	if len(project.Secrets) == 0 {
		t.Error("docker-compose.yml declares no secrets: passwords would be inline")
	}
}
