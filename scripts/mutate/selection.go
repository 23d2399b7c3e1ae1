package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"hash/fnv"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A CI run cannot afford the whole matrix: each mutation links a test binary
// of its own, and 500 of them are most of an hour on two cores. So CI runs
// the mutations a change can have broken — those whose target file, or a
// test file defining their test, changed since the last landed main — plus
// one share of the rest in rotation. The ledger .ci/landed gains one line
// per landing, so consecutive CI runs take consecutive shares, and every
// mutation runs at least once in any `of` consecutive runs. The whole
// matrix is still one command: go run ./scripts/mutate.

// share is one of the matrix's rotating parts: the mutations whose bucket
// (a hash of the name, so an entry keeps its bucket as others come and go)
// is index, of `of`.
type share struct{ index, of int }

// parseShare reads "K/N" (0 ≤ K < N).
func parseShare(s string) (share, error) {
	k, n, ok := strings.Cut(s, "/")
	index, err1 := strconv.Atoi(k)
	of, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || of < 1 || index < 0 || index >= of {
		return share{}, fmt.Errorf("-share %q: want K/N with 0 <= K < N, e.g. 2/5", s)
	}
	return share{index, of}, nil
}

func (s share) holds(m Mutation) bool {
	h := fnv.New32a()
	h.Write([]byte(m.Name))
	return int(h.Sum32()%uint32(s.of)) == s.index
}

// change is what differs from a base revision: the files, and the test
// functions added or edited, by package directory.
type change struct {
	files map[string]bool     // slash paths from the repository root
	tests map[string][]string // package dir ("outbox") → Test functions in its changed _test.go files
}

// touches reports whether m's target file, or a test in its package that
// its pattern names, is part of the change.
func (c change) touches(m Mutation) bool {
	if c.files[path.Clean(m.File)] {
		return true
	}
	testRE, err := regexp.Compile("^(" + m.Test + ")$")
	if err != nil {
		return true // apply reports the bad pattern
	}
	for _, name := range c.tests[path.Clean(strings.TrimPrefix(m.Pkg, "./"))] {
		if testRE.MatchString(name) {
			return true
		}
	}
	return false
}

// pick keeps, of the mutations, those the change touches and those in the
// share; it says how many came by each way.
func pick(all []Mutation, c change, s share) (picked []Mutation, touched, rotated int) {
	for _, m := range all {
		switch {
		case c.touches(m):
			touched++
		case s.holds(m):
			rotated++
		default:
			continue
		}
		picked = append(picked, m)
	}
	return picked, touched, rotated
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w*)\(`)

// changedSince is the change from rev to the working tree (committed and
// not, and files git does not track yet), read from git in root.
func changedSince(root, rev string) (change, error) {
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	if _, err := git("merge-base", "--is-ancestor", rev, "HEAD"); err != nil {
		return change{}, fmt.Errorf("%s is not an ancestor of HEAD: %w", rev, err)
	}
	diffed, err := git("diff", "--name-only", "--no-renames", rev, "--")
	if err != nil {
		return change{}, err
	}
	untracked, err := git("ls-files", "--others", "--exclude-standard")
	if err != nil {
		return change{}, err
	}
	c := change{files: map[string]bool{}, tests: map[string][]string{}}
	for _, f := range strings.Fields(string(diffed) + "\n" + string(untracked)) {
		c.files[f] = true
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted: its tests are gone, and a mutation naming them goes stale
		}
		if err != nil {
			return change{}, err
		}
		before, _ := git("show", rev+":"+f) // nothing when the file is new
		was := testFuncs(before)
		for name, text := range testFuncs(src) {
			if old, ok := was[name]; !ok || old != text {
				c.tests[path.Dir(f)] = append(c.tests[path.Dir(f)], name)
			}
		}
	}
	for _, tests := range c.tests {
		slices.Sort(tests)
	}
	return c, nil
}

// testFuncs maps each top-level Test function of a Go file to its text, so
// that a test counts as changed only when its own text did: a test file
// that gains one test does not bring back every mutation its other tests
// hold. A file that does not parse counts each match of testFunc as
// changed, with no text to compare.
func testFuncs(src []byte) map[string]string {
	funcs := map[string]string{}
	if len(src) == 0 {
		return funcs
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		for _, m := range testFunc.FindAllSubmatch(src, -1) {
			funcs[string(m[1])] = "\x00unparsed"
		}
		return funcs
	}
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") {
			continue
		}
		funcs[fn.Name.Name] = string(src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset])
	}
	return funcs
}
