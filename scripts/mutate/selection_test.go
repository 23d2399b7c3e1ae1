package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want share
		ok   bool
	}{
		{"0/5", share{0, 5}, true},
		{"4/5", share{4, 5}, true},
		{"0/1", share{0, 1}, true},
		{"5/5", share{}, false},
		{"-1/5", share{}, false},
		{"1/0", share{}, false},
		{"1", share{}, false},
		{"a/b", share{}, false},
	} {
		got, err := parseShare(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseShare(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// Every mutation is in exactly one share, so the shares of `of`
// consecutive CI runs together run the whole matrix.
func TestShares_CoverTheMatrixOnce(t *testing.T) {
	t.Parallel()
	const of = 5
	counts := map[string]int{}
	sizes := make([]int, of)
	for k := range of {
		picked, touched, rotated := pick(mutations, change{}, share{k, of})
		if touched != 0 || rotated != len(picked) {
			t.Fatalf("share %d/%d with no change: %d touched, %d rotated of %d", k, of, touched, rotated, len(picked))
		}
		sizes[k] = len(picked)
		for _, m := range picked {
			counts[m.Name]++
		}
	}
	for _, m := range mutations {
		if counts[m.Name] != 1 {
			t.Errorf("%q is in %d shares, want 1", m.Name, counts[m.Name])
		}
	}
	// A hash spreads the names; a share far from a fifth would make one
	// CI run in five much slower than the rest.
	for k, n := range sizes {
		if want := len(mutations) / of; n < want/2 || n > want*3/2 {
			t.Errorf("share %d/%d holds %d mutations, want about %d", k, of, n, want)
		}
	}
}

func TestPick_TakesWhatTheChangeTouches(t *testing.T) {
	t.Parallel()
	all := []Mutation{
		{Name: "a", File: "outbox/mark.go", Pkg: "./outbox/", Test: "TestMark"},
		{Name: "b", File: "internal/engine/claim/claim.go", Pkg: "./outbox/", Test: "TestClaim_.*"},
		{Name: "c", File: "webhook/retry.go", Pkg: "./webhook/", Test: "TestRetry|TestBackoff"},
		{Name: "d", File: "webhook/retry.go", Pkg: "./webhook/", Test: "TestOther"},
		{Name: "e", File: "smtp/pool.go", Pkg: "./smtp/", Test: "TestPool"},
	}
	none := share{0, 1 << 30} // no share: only what the change touches
	for _, tc := range []struct {
		name string
		c    change
		want []string
	}{
		{"nothing changed", change{}, nil},
		{"a target file", change{files: map[string]bool{"webhook/retry.go": true}}, []string{"c", "d"}},
		{"a test in the package", change{tests: map[string][]string{"outbox": {"TestClaim_Disjoint"}}}, []string{"b"}},
		{"an alternative of the pattern", change{tests: map[string][]string{"webhook": {"TestBackoff"}}}, []string{"c"}},
		{"a prefix is not the test", change{tests: map[string][]string{"outbox": {"TestMarkAll"}}}, nil},
		{"the same test name in another package", change{tests: map[string][]string{"smtp": {"TestMark"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			picked, touched, _ := pick(all, tc.c, none)
			var got []string
			for _, m := range picked {
				got = append(got, m.Name)
			}
			if !slices.Equal(got, tc.want) || touched != len(tc.want) {
				t.Errorf("picked %v (%d touched), want %v", got, touched, tc.want)
			}
		})
	}
}

// changedSince reads a real repository: committed changes since the base,
// uncommitted edits and new files all count, and a test file's Test
// functions are found by package directory.
func TestChangedSince_ReadsGit(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("p/p.go", "package p\n")
	write("p/p_test.go", "package p\n\nfunc TestKept(t *testing.T) {}\n\nfunc TestEdited(t *testing.T) {}\n")
	write("q/q.go", "package q\n")
	git("add", ".")
	git("commit", "-qm", "base")
	base := git("rev-parse", "HEAD")

	// TestKept moves but keeps its text; TestEdited's body changes;
	// TestOne and TestTwo are new.
	write("p/p_test.go", "package p\n\nfunc TestOne(t *testing.T) {}\n\nfunc TestEdited(t *testing.T) { t.Log() }\n\nfunc helper() {}\nfunc TestTwo(t *testing.T) {}\n\nfunc TestKept(t *testing.T) {}\n")
	git("commit", "-qam", "tests")
	write("q/q.go", "package q\n\nvar x = 1\n")                          // uncommitted
	write("r/r_test.go", "package r\n\nfunc TestNew(t *testing.T) {}\n") // untracked

	c, err := changedSince(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for f := range c.files {
		files = append(files, f)
	}
	slices.Sort(files)
	if want := []string{"p/p_test.go", "q/q.go", "r/r_test.go"}; !slices.Equal(files, want) {
		t.Errorf("files = %v, want %v", files, want)
	}
	if got := fmt.Sprint(c.tests); got != "map[p:[TestEdited TestOne TestTwo] r:[TestNew]]" {
		t.Errorf("tests = %s", got)
	}
	if _, err := changedSince(dir, strings.Repeat("0", 40)); err == nil {
		t.Error("changedSince of a revision that is not in the history: no error")
	}
}
