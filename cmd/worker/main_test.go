package main

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/postbox/postbox/internal/harness/gobuild"
	"github.com/postbox/postbox/internal/testsupport/pgtest"
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
