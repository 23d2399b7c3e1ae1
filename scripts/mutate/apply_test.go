package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeModule writes a tiny module whose test TestNamed fails only when its
// mechanism is removed (broken = true), and whose other switches make the
// package fail for reasons that are not the named test failing: a hang, a
// TestMain that cannot reach its "database", another test failing.
func fakeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module fake\n\ngo 1.22\n",
		"p/p.go": `package p

const (
	broken   = false // the mechanism, removed
	hang     = false // the named test hangs
	outage   = false // TestMain cannot start
	other    = false // another test fails
	flakyOff = false // the named test fails unmutated
	skipped  = false // the named test skips
	crash    = false // the mechanism, removed: a goroutine the named test starts panics
)
`,
		"p/p_test.go": `package p

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if outage {
		fmt.Println("cannot reach postgres: connection refused")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestNamed(t *testing.T) {
	if skipped {
		t.Skip("no database")
	}
	if hang {
		time.Sleep(time.Hour) // simulates: a test that hangs
	}
	if broken || flakyOff {
		t.Fatal("mechanism removed")
	}
	if crash {
		// The panic ends the process while the test waits: a test that
		// went on once the goroutine had begun to panic could report PASS
		// before the process died (it did, on a busy machine).
		go func() { panic("unrecovered in a goroutine") }()
		select {}
	}
}

func TestOther(t *testing.T) {
	if other {
		t.Fatal("unrelated failure")
	}
}
`,
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func flip(name, test string) Mutation {
	return Mutation{
		Name:    "fake: " + name,
		File:    "p/p.go",
		Find:    "\t" + name + " ",
		Replace: "\t" + name + " = true //",
		Pkg:     "./p/",
		Test:    test,
	}
}

// TestApply_KilledOnlyWhenTheNamedTestFails locks the verdict rule: a
// mutation is killed only by its own test's "fail"; a hang, a package that
// fails before the test runs, another test failing, or a skip is
// INCONCLUSIVE, never a kill.
func TestApply_KilledOnlyWhenTheNamedTestFails(t *testing.T) {
	t.Parallel()
	root := fakeModule(t)

	for _, tc := range []struct {
		m    Mutation
		want string // prefix of the verdict
	}{
		{flip("broken", "TestNamed"), "killed"},
		{flip("crash", "TestNamed"), "killed"}, // the panic is the test's: it crashed while it alone ran
		{flip("hang", "TestNamed"), "INCONCLUSIVE"},
		{flip("outage", "TestNamed"), "INCONCLUSIVE"},
		{flip("other", "TestNamed|TestOther"), "killed"}, // TestOther is named: its failure is a kill
		{flip("skipped", "TestNamed"), "INCONCLUSIVE"},
		{flip("other", "TestNamed"), "SURVIVED"}, // only TestNamed runs; it passes
		{flip("nothing", "TestNamed"), "STALE"},  // the text is not in the file
		{flip("broken", "TestGone"), "STALE"},    // the test does not exist
	} {
		t.Run(tc.m.Name+" "+tc.m.Test, func(t *testing.T) {
			t.Parallel()
			// Only the hang has to reach the test binary's timeout; the
			// others must finish well inside theirs however busy the
			// machine is.
			timeout := time.Minute
			if tc.m.Name == "hang" {
				timeout = 3 * time.Second
			}
			got, _ := apply(root, tc.m, timeout)
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("apply(%s, %s) = %q, want %s…", tc.m.Name, tc.m.Test, firstLine(got), tc.want)
			}
		})
	}
}
