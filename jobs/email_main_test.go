package jobs

import (
	"os"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestMain is the jobs package's only one: tests of every job kind share
// it (pgtest needs it to stop a throwaway cluster).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
