package main

import (
	"os"
	"regexp"
	"sort"
	"testing"
)

// TestConfigReferenceMatchesCode checks the configuration table of
// docs/OPERATIONS.md against the code: every variable LoadConfig reads is
// documented, and every documented variable is read. The list comes from recording what
// LoadConfig asks for, so a new variable cannot slip in undocumented.
func TestConfigReferenceMatchesCode(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	if _, err := LoadConfig(func(k string) (string, bool) { read[k] = true; return "", false }); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \\|")
	name := regexp.MustCompile("`([A-Z_]+)`")
	for _, m := range row.FindAllStringSubmatch(string(page), -1) {
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			documented[n[1]] = true
		}
	}
	for _, n := range sorted(read) {
		if !documented[n] {
			t.Errorf("%s is read by the worker but missing from docs/OPERATIONS.md's configuration table", n)
		}
	}
	for _, n := range sorted(documented) {
		if !read[n] {
			t.Errorf("%s is documented in docs/OPERATIONS.md but the worker never reads it", n)
		}
	}
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
