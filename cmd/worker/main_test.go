package main

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"

	"github.com/postbox/postbox/internal/tooling/harness/gobuild"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// workerBinary builds cmd/worker once per test process, so tests can run it
// as a user would: as a separate process that can be signalled and killed.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "postbox-worker-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = gobuild.Worker(context.Background(), dir)
	})
	if buildErr != nil {
		t.Fatalf("build worker: %v", buildErr)
	}
	return binPath
}

// cliAgainst runs worker commands in-process against the database at url,
// logging warnings only, and returns each one's exit code, stdout and
// stderr.
func cliAgainst(url string) func(args ...string) (int, string, string) {
	lookup := func(k string) (string, bool) {
		switch k {
		case "DATABASE_URL":
			return url, true
		case "LOG_LEVEL":
			return "warn", true
		}
		return "", false
	}
	return func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runMain(args, lookup, &out, &errOut)
		return code, out.String(), errOut.String()
	}
}
