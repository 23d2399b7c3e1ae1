package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/postbox/postbox"

// tiers are the layers of the code, lowest first, as ARCHITECTURE.md
// ("Layers") draws them. A package may import its own tier and the tiers
// below it; an import of a higher tier is an arrow running back up, and a
// newcomer can no longer read a tier without the ones above it. The first
// prefix that matches a package's path names its tier.
var tiers = []struct {
	name     string
	prefixes []string
}{
	{"engine", []string{"leases", "internal/engine"}},
	{"transport", []string{"smtp", "outbox", "webhook", "migrations"}},
	{"wiring", []string{"jobs"}},
	{"operator", []string{"internal/operator", "portal"}},
	{"command", []string{"cmd"}},
	{"tooling", []string{"internal/tooling", "scripts", "deploy", "docs"}},
}

// tierOf returns the rank and name of the tier holding pkg, a path inside
// the module ("outbox/mailevents"); ok is false for a path no tier claims.
func tierOf(pkg string) (rank int, name string, ok bool) {
	for i, tier := range tiers {
		for _, prefix := range tier.prefixes {
			if pkg == prefix || strings.HasPrefix(pkg, prefix+"/") {
				return i, tier.name, true
			}
		}
	}
	return 0, "", false
}

// TestLayers_NoImportRunsBackUp reads the imports of every shipped (non-test)
// Go file and fails on an import of a higher tier, and on a package no tier
// claims, so a new top-level package has to be placed before it lands.
// Tests may import anything below the tooling: a test of the claim uses the
// harness.
func TestLayers_NoImportRunsBackUp(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		rank, name, ok := tierOf(pkg)
		if !ok {
			t.Errorf("%s: package %s belongs to no tier; add it to tiers and to ARCHITECTURE.md's Layers", path, pkg)
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, spec := range file.Imports {
			imported, _ := strconv.Unquote(spec.Path.Value)
			inside, found := strings.CutPrefix(imported, module+"/")
			if !found {
				continue
			}
			upRank, upName, ok := tierOf(inside)
			if ok && upRank > rank {
				t.Errorf("%s (%s tier) imports %s (%s tier): an arrow back up", path, name, inside, upName)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLayers_TierOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pkg, want string
	}{
		{"leases", "engine"},
		{"internal/engine", "engine"},
		{"internal/engine/claim", "engine"},
		{"outbox/mailevents", "transport"},
		{"webhook/receiver", "transport"},
		{"jobs", "wiring"},
		{"internal/operator/story", "operator"},
		{"cmd/worker", "command"},
		{"internal/tooling/harness/bench", "tooling"},
		{"scripts/mutate", "tooling"},
	} {
		if _, got, _ := tierOf(tc.pkg); got != tc.want {
			t.Errorf("tierOf(%q) = %q, want %q", tc.pkg, got, tc.want)
		}
	}
	if _, _, ok := tierOf("outboxes"); ok {
		t.Error(`tierOf("outboxes") claimed a package no prefix names`)
	}
}
