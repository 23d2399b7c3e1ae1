package httpapi

import (
	"os"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
