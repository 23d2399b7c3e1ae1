package docs

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// designDoc is the transport's design, relative to the repository root.
// Code cites it as the path, a comma and a section heading.
const designDoc = "docs/design/outbox-transport.md"

// repoRoot is the repository root as seen from this package's directory.
const repoRoot = ".."

// TestRepository_CitesNoOutsideRecord fails when a file of the repository
// (tracked, or new and not ignored) names the design record that lived
// outside it, its release label, or an issue number: a reader of the
// repository cannot open any of them. Cite the design document's section
// instead. The patterns are spelled in pieces so this file does not match
// itself.
func TestRepository_CitesNoOutsideRecord(t *testing.T) {
	t.Parallel()
	banned := []struct {
		what string
		re   *regexp.Regexp
	}{
		{"the outside design record", regexp.MustCompile(`ADR` + `-072`)},
		{"a release label", regexp.MustCompile(`pre` + `-P5`)},
		{"an issue number", regexp.MustCompile(`issue` + ` #[0-9]`)},
	}
	for _, path := range repoFiles(t) {
		src, ok := readText(t, path)
		if !ok {
			continue
		}
		for _, b := range banned {
			for _, loc := range b.re.FindAllIndex(src, -1) {
				t.Errorf("%s:%d names %s (%q); cite %s by section instead",
					path, lineOf(src, loc[0]), b.what, src[loc[0]:loc[1]], designDoc)
			}
		}
	}
}

// section is one "## " section of the design document with its three
// evidence lines.
type section struct {
	heading     string
	line        int
	files       []string
	tests       map[string][]string // package dir → test function names
	mutations   []string
	hasEvidence [3]bool // Implemented in, Locked by, Proved by
}

// sectionsWithoutEvidence are the design document's sections that record
// no mechanism of their own.
var sectionsWithoutEvidence = []string{"Residuals", "Origins"}

// TestDesignDoc_NamesWhatExists reads every section's "Implemented in",
// "Locked by" and "Proved by" lines and checks them against the tree: each
// file exists; each test is a func TestX( in its package's _test.go files;
// each mutation is registered in scripts/mutate, tests that package, and
// names one of the section's tests as the one that must fail. A rename that
// leaves the document behind fails here, not in a newcomer's search.
func TestDesignDoc_NamesWhatExists(t *testing.T) {
	t.Parallel()
	sections := designSections(t)
	if len(sections) < 10 {
		t.Fatalf("%s: found only %d sections; the parsing is broken", designDoc, len(sections))
	}
	muts := registeredMutations(t)
	testsIn := map[string][]string{}
	for _, s := range sections {
		where := fmt.Sprintf("%s:%d (%s)", designDoc, s.line, s.heading)
		if slices.Contains(sectionsWithoutEvidence, s.heading) {
			continue
		}
		for i, name := range []string{"Implemented in", "Locked by", "Proved by"} {
			if !s.hasEvidence[i] {
				t.Errorf("%s: no **%s:** line", where, name)
			}
		}
		for _, f := range s.files {
			if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(f))); err != nil {
				t.Errorf("%s: Implemented in names %s: %v", where, f, err)
			}
		}
		for pkg, tests := range s.tests {
			if testsIn[pkg] == nil {
				testsIn[pkg] = testFuncs(t, pkg)
			}
			for _, name := range tests {
				if !slices.Contains(testsIn[pkg], name) {
					t.Errorf("%s: Locked by names %s in %s, which has no func %s(", where, name, pkg, name)
				}
			}
		}
		for _, name := range s.mutations {
			m, ok := muts[name]
			if !ok {
				t.Errorf("%s: Proved by names mutation %q, which scripts/mutate does not register", where, name)
				continue
			}
			if !m.testsOneOf(s.tests) {
				t.Errorf("%s: mutation %q runs %s in %s, none of the tests this section's Locked by line names there",
					where, name, m.test, m.pkg)
			}
		}
	}
}

// TestDesignDoc_CitationsNameSections checks every citation of the design
// document in the repository — the path, a comma, a section — against the
// document's headings, so a renamed section cannot strand the comments that
// send readers to it. A citation may wrap over comment lines.
func TestDesignDoc_CitationsNameSections(t *testing.T) {
	t.Parallel()
	var headings []string
	for _, s := range designSections(t) {
		headings = append(headings, s.heading)
	}
	// Longest first, so a heading that begins another cannot shadow it.
	slices.SortFunc(headings, func(a, b string) int { return len(b) - len(a) })
	cite := []byte(designDoc + ", ")
	found := 0
	for _, path := range repoFiles(t) {
		src, ok := readText(t, path)
		if !ok {
			continue
		}
		for i := 0; ; {
			j := bytes.Index(src[i:], cite)
			if j < 0 {
				break
			}
			at := i + j
			i = at + len(cite)
			found++
			rest := unwrap(src[i:min(len(src), i+300)])
			if !slices.ContainsFunc(headings, func(h string) bool { return citesHeading(rest, h) }) {
				t.Errorf("%s:%d cites %s, %q…, which is no section of it (sections: %s)",
					path, lineOf(src, at), designDoc, firstWords(rest, 4), strings.Join(headings, "; "))
			}
		}
	}
	if found < 20 {
		t.Errorf("found only %d citations of %s; the code should cite it where it carries a decision", found, designDoc)
	}
}

func TestCitesHeading(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rest    string
		heading string
		want    bool
	}{
		{"Detached marks): the mark", "Detached marks", true},
		{"Detached marks.", "Detached marks", true},
		{"Detached marks", "Detached marks", true},
		{"Detached markings", "Detached marks", false},
		{"Detached", "Detached marks", false},
		{"detached marks", "Detached marks", false},
	} {
		if got := citesHeading(tc.rest, tc.heading); got != tc.want {
			t.Errorf("citesHeading(%q, %q) = %v, want %v", tc.rest, tc.heading, got, tc.want)
		}
	}
}

func TestUnwrap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"Detached\n// marks): x", "Detached marks): x"},
		{"Detached\n\t// marks", "Detached marks"},
		{"Claim and\n-- lease", "Claim and lease"},
		{"Claim and\n  lease", "Claim and lease"},
		{"Claim and\n# lease", "Claim and lease"},
	} {
		if got := unwrap([]byte(tc.in)); got != tc.want {
			t.Errorf("unwrap(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// citesHeading reports whether text begins with heading as a whole phrase.
func citesHeading(text, heading string) bool {
	rest, ok := strings.CutPrefix(text, heading)
	if !ok {
		return false
	}
	return rest == "" || !isWordByte(rest[0])
}

func isWordByte(c byte) bool {
	return c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// commentBreak is a line break with the next line's comment marker, as a
// citation wraps in Go, SQL, shell and Markdown.
var commentBreak = regexp.MustCompile(`\s*\n\s*(?:(?://|--|#|\*)\s*)?`)

// unwrap joins wrapped comment lines into one line of text.
func unwrap(b []byte) string {
	return commentBreak.ReplaceAllString(string(b), " ")
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}

// designSections parses the design document's "## " sections and their
// evidence lines:
//
//	**Implemented in:** `path`, `path`
//	**Locked by:** `pkg/dir`: `TestA`, `TestB`; `other`: `TestC`
//	**Proved by:** `mutation name`, `mutation name`
func designSections(t *testing.T) []section {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(designDoc)))
	if err != nil {
		t.Fatal(err)
	}
	quoted := regexp.MustCompile("`([^`]+)`")
	items := func(s string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	var sections []section
	inFence := false
	for i, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence {
			continue
		}
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections = append(sections, section{heading: strings.TrimSpace(h), line: i + 1, tests: map[string][]string{}})
			continue
		}
		if len(sections) == 0 {
			continue
		}
		s := &sections[len(sections)-1]
		switch {
		case strings.HasPrefix(line, "**Implemented in:**"):
			s.hasEvidence[0] = true
			s.files = append(s.files, items(line)...)
		case strings.HasPrefix(line, "**Locked by:**"):
			s.hasEvidence[1] = true
			for group := range strings.SplitSeq(strings.TrimPrefix(line, "**Locked by:**"), ";") {
				pkg, tests, ok := strings.Cut(group, ":")
				pkgs := items(pkg)
				if !ok || len(pkgs) != 1 {
					t.Errorf("%s:%d: Locked by group %q is not `pkg`: `TestX`, …", designDoc, i+1, strings.TrimSpace(group))
					continue
				}
				s.tests[pkgs[0]] = append(s.tests[pkgs[0]], items(tests)...)
			}
		case strings.HasPrefix(line, "**Proved by:**"):
			s.hasEvidence[2] = true
			s.mutations = append(s.mutations, items(line)...)
		}
	}
	return sections
}

// testFuncs lists the Test functions declared in pkg's _test.go files.
func testFuncs(t *testing.T, pkg string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(pkg), "*_test.go"))
	if err != nil || len(paths) == 0 {
		t.Errorf("package %s: no _test.go files (%v)", pkg, err)
		return []string{}
	}
	decl := regexp.MustCompile(`(?m)^func (Test\w*)\(`)
	names := []string{}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllSubmatch(src, -1) {
			names = append(names, string(m[1]))
		}
	}
	return names
}

// mutation is what the design document checks of a registered mutation.
type mutation struct {
	pkg  string // as Mutation.Pkg, e.g. "./outbox/"
	test string // a regexp, as Mutation.Test
}

// testsOneOf reports whether m runs in one of the packages of tests and
// its pattern matches one of that package's tests whole, as go test -run
// ^(pattern)$ would.
func (m mutation) testsOneOf(tests map[string][]string) bool {
	re, err := regexp.Compile("^(" + m.test + ")$")
	if err != nil {
		return false
	}
	for pkg, names := range tests {
		if path.Clean(strings.TrimPrefix(m.pkg, "./")) == path.Clean(pkg) && slices.ContainsFunc(names, re.MatchString) {
			return true
		}
	}
	return false
}

// registeredMutations reads every Mutation literal in scripts/mutate's
// mutations_*.go files, by name, resolving string constants declared in the
// same file. It parses rather than runs the registry: scripts/mutate is a
// main package.
func registeredMutations(t *testing.T) map[string]mutation {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "scripts", "mutate", "mutations_*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts/mutate/mutations_*.go (%v)", err)
	}
	out := map[string]mutation{}
	for _, p := range paths {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		consts := map[string]string{}
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringValue(vs.Values[i], consts); ok {
							consts[name.Name] = s
						}
					}
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if id, ok := lit.Type.(*ast.Ident); !ok || id.Name != "Mutation" {
				return true
			}
			fields := map[string]string{}
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, ok := kv.Key.(*ast.Ident)
				if !ok {
					continue
				}
				if s, ok := stringValue(kv.Value, consts); ok {
					fields[key.Name] = s
				}
			}
			if fields["Name"] == "" {
				t.Errorf("%s: a Mutation whose Name is not a string this test can read", fset.Position(lit.Pos()))
				return false
			}
			out[fields["Name"]] = mutation{pkg: fields["Pkg"], test: fields["Test"]}
			return false
		})
	}
	return out
}

// stringValue evaluates a string literal, a known constant, or a sum of
// them.
func stringValue(e ast.Expr, consts map[string]string) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[v.Name]
		return s, ok
	case *ast.ParenExpr:
		return stringValue(v.X, consts)
	case *ast.BinaryExpr:
		if v.Op != token.ADD {
			return "", false
		}
		a, ok1 := stringValue(v.X, consts)
		b, ok2 := stringValue(v.Y, consts)
		return a + b, ok1 && ok2
	}
	return "", false
}

// repoFiles lists the repository's files, relative to its root: those git
// tracks and those new and not ignored, so a colleague's file is checked
// before it is committed. Without git (a source archive) it walks the
// tree instead.
func repoFiles(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err == nil {
		var files []string
		for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		slices.Sort(files)
		return slices.Compact(files)
	}
	t.Logf("git ls-files: %v; walking the tree instead", err)
	var files []string
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(repoRoot, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readText reads a repository file; ok is false for a file deleted from
// the work tree but still in the index, and for binary files.
func readText(t *testing.T, path string) ([]byte, bool) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return src, !bytes.Contains(src, []byte{0})
}

func lineOf(src []byte, offset int) int {
	return bytes.Count(src[:offset], []byte("\n")) + 1
}
