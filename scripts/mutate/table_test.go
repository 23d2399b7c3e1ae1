package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every mutation's text occurs exactly once in its file, so the matrix
// has not gone stale: a refactor that moves a mechanism must move its
// mutation too. (The matrix itself runs in CI: go run ./scripts/mutate.)
func TestMutations_StillApply(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	for _, m := range mutations {
		if seen[m.Name] {
			t.Errorf("two mutations named %q", m.Name)
		}
		seen[m.Name] = true
		src, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			t.Errorf("%s: %v", m.Name, err)
			continue
		}
		if n := strings.Count(string(src), m.Find); n != 1 {
			t.Errorf("%s: its text occurs %d times in %s, want once", m.Name, n, m.File)
		}
	}
}
