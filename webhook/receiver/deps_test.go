package receiver

import (
	"go/build"
	"strings"
	"testing"
)

// TestImportsStandardLibraryOnly keeps the package light: a receiver's
// binary links none of postbox's server-side dependencies. The standard
// library imports only itself, so the direct imports decide it.
func TestImportsStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("package receiver imports %s: only the standard library is allowed", imp)
		}
	}
}
