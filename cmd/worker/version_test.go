package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/engine/version"
)

// TestVersion_StampedByTheDockerfilesLdflags builds the worker with the
// -ldflags the Dockerfile passes, VERSION and REVISION filled in as a
// release build does, and runs `worker version`: it must print that
// version, not "devel" or the module's. The linker ignores an -X for a
// variable that does not exist, so only running the build proves the
// Dockerfile names the right one.
func TestVersion_StampedByTheDockerfilesLdflags(t *testing.T) {
	t.Parallel()
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-ldflags="([^"]+)"`).FindSubmatch(df)
	if m == nil {
		t.Fatal(`the Dockerfile's go build has no -ldflags="…"`)
	}
	const stamp, revision = "v9.8.7-stamptest", "0123456789abcdef"
	ldflags := os.Expand(string(m[1]), func(name string) string {
		return map[string]string{"VERSION": stamp, "REVISION": revision}[name]
	})
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/worker")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", ldflags, err, out)
	}

	out, err := exec.CommandContext(context.Background(), bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("worker version: %v\n%s", err, out)
	}
	if want := "postbox worker " + stamp + " (revision " + revision; !strings.HasPrefix(string(out), want) {
		t.Errorf("worker version = %q, want it to start %q", out, want)
	}
	out, err = exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("worker version --json: %v", err)
	}
	var info version.Info
	if err := json.Unmarshal(out, &info); err != nil || info.Version != stamp || info.Revision != revision {
		t.Errorf("worker version --json = %s (%v), want version %s, revision %s", out, err, stamp, revision)
	}
}
