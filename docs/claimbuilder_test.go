package docs

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// claimBuilder is the one place a claim's SQL counts an attempt: the design
// (docs/design/outbox-transport.md, Claim and lease) makes the claim the
// only statement that raises attempts, and every claim builds its SET list
// with claim.Set.
const claimBuilder = "internal/engine/claim/set.go"

// countsAnAttempt matches SQL that raises attempts, in any spelling:
// "attempts + 1", "attempts+1", "attempts = d.attempts + $3".
var countsAnAttempt = regexp.MustCompile(`(?i)\battempts\s*\+\s*1\b|\battempts\s*=\s*[\w.%]*attempts\s*\+`)

// TestClaimBuilder_OnePlaceRaisesAttempts reads every string literal of the
// shipped code (SQL lives in them; tests, the mutation matrix and other
// tooling are not shipped) and fails unless exactly one raises attempts,
// in claim.Set: a second spelling is a claim that no longer goes through
// the builder, or a mark that counts.
func TestClaimBuilder_OnePlaceRaisesAttempts(t *testing.T) {
	t.Parallel()
	var found []string
	parseModule(t, 0, func(path string, fset *token.FileSet, f *ast.File) {
		rel := shippedPath(t, path)
		if rel == "" {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Errorf("%s: %v", fset.Position(lit.Pos()), err)
				return true
			}
			if countsAnAttempt.MatchString(s) {
				found = append(found, rel+":"+strconv.Itoa(fset.Position(lit.Pos()).Line))
			}
			return true
		})
	})
	if len(found) != 1 || !strings.HasPrefix(found[0], claimBuilder+":") {
		t.Errorf("SQL raising attempts found in %v; want it once, in %s (claim.Set): build every claim's SET list with claim.Set, and count no attempt elsewhere", found, claimBuilder)
	}
}

// shippedPath is path (as parseModule walks it) from the repository root,
// or "" for a file of the tooling tier, which does not ship.
func shippedPath(t *testing.T, path string) string {
	t.Helper()
	rel, err := filepath.Rel(repoRoot, path)
	if err != nil {
		t.Fatal(err)
	}
	rel = filepath.ToSlash(rel)
	if _, tier, ok := tierOf(filepath.ToSlash(filepath.Dir(rel))); ok && tier == "tooling" {
		return ""
	}
	return rel
}

// TestClaimBuilder_Spellings pins what countsAnAttempt catches.
func TestClaimBuilder_Spellings(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"SET attempts = attempts + 1, next_attempt_at = now()": true,
		"attempts = n.attempts + 1":                            true,
		"SET attempts=attempts+1":                              true,
		"attempts = d.attempts + $3":                           true,
		"ATTEMPTS = ATTEMPTS + 1":                              true,
		"attempts = %sattempts + 1":                            true,
		"attempts = o.attempts":                                false,
		"attempts > 0 AND prior_attempts + attempts":           false,
		"WHERE d.attempts = 0":                                 false,
	} {
		if got := countsAnAttempt.MatchString(s); got != want {
			t.Errorf("countsAnAttempt(%q) = %v, want %v", s, got, want)
		}
	}
}
