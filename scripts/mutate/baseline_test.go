package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBaseline_AbortsWhenANamedTestFailsUnmutated locks the
// baseline: before any mutation is tried, every named test must pass on the
// unmutated tree; one that fails (or is missing, or skips) is reported by
// name.
func TestBaseline_AbortsWhenANamedTestFailsUnmutated(t *testing.T) {
	t.Parallel()
	slots := make(chan struct{}, 2)

	good := fakeModule(t)
	if _, err := baseline(good, []Mutation{flip("broken", "TestNamed"), flip("other", "TestOther")}, 2*time.Minute, slots); err != nil {
		t.Fatalf("baseline of a passing tree: %v", err)
	}
	if _, err := baseline(good, []Mutation{flip("broken", "TestMissing")}, 2*time.Minute, slots); err == nil || !strings.Contains(err.Error(), "TestMissing") {
		t.Fatalf("baseline with a missing test = %v, want an error naming TestMissing", err)
	}

	for _, sw := range []string{"flakyOff", "skipped", "outage"} {
		bad := fakeModule(t)
		writeSwitch(t, bad, sw) // the "unmutated" tree itself is broken
		_, err := baseline(bad, []Mutation{flip("broken", "TestNamed")}, 2*time.Minute, slots)
		if err == nil || !strings.Contains(err.Error(), "TestNamed") {
			t.Fatalf("baseline with %s unmutated = %v, want an error naming TestNamed", sw, err)
		}
	}
}

func writeSwitch(t *testing.T, root, name string) {
	t.Helper()
	path := filepath.Join(root, "p/p.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := flip(name, "")
	if err := os.WriteFile(path, []byte(strings.Replace(string(src), m.Find, m.Replace, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A failed baseline test is reported with its own output (its subtests'
// included), not the package's last lines, which another test may fill.
func TestTestOutput(t *testing.T) {
	t.Parallel()
	out := []byte(`{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"    a_test.go:9: the reason\n"}
{"Action":"output","Test":"TestAB","Output":"another test's line\n"}
{"Action":"output","Test":"TestA/sub","Output":"    a_test.go:12: the subtest's reason\n"}
{"Action":"output","Test":"TestB","Output":"TestB's noise\n"}
{"Action":"fail","Test":"TestA"}
`)
	want := "    a_test.go:9: the reason\n    a_test.go:12: the subtest's reason"
	if got := testOutput(out, "TestA"); got != want {
		t.Fatalf("testOutput = %q, want %q", got, want)
	}
}
