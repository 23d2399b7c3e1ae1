package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// namedPages are the pages that describe the code by its names: each code
// span in them that spells a Go name, a file or a folder of this
// repository must name one that exists. ARCHITECTURE.md is the newcomer's
// map; a map that sends readers to a function renamed two releases ago is
// worse than none.
var namedPages = []string{"docs/ARCHITECTURE.md"}

// TestPages_NameWhatExists checks every `code span` of namedPages. A span
// may hold several names (`outbox.NewDispatcher(db, outbox.Config{…})`);
// each is checked:
//
//   - a path with a slash or a file extension (`outbox/claim.go`,
//     `internal/operator/console`) must exist;
//   - a dotted Go name whose first part is one of this module's packages
//     (`engine.Lane`, `outbox.Dispatcher.Drain`) must be declared there: a
//     func, type, var or const, then a method or a struct field;
//   - a dotted name starting with a type (`Dispatcher.Drain`,
//     `Config.SecretKeys`) must be a method or field of a type of that
//     name in some package of the module.
//
// Other packages' names (river.RecordOutput) are left alone.
func TestPages_NameWhatExists(t *testing.T) {
	t.Parallel()
	decls := moduleDecls(t)
	for _, page := range namedPages {
		src, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, span := range codeSpans(string(src)) {
			where := page + ":" + strconv.Itoa(lineOf(src, span.offset))
			for _, p := range pathsIn(span.text) {
				checked++
				if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(strings.TrimPrefix(p, "./")))); err != nil {
					t.Errorf("%s: `%s` names %s, which does not exist", where, span.text, p)
				}
			}
			for _, name := range goNamesIn(span.text) {
				ok, ours := decls.resolve(name)
				if !ours {
					continue
				}
				checked++
				if !ok {
					t.Errorf("%s: `%s` names %s, which no package of the module declares", where, span.text, name)
				}
			}
		}
		if checked < 40 {
			t.Errorf("%s: only %d names checked; the span parsing is broken", page, checked)
		}
	}
}

func TestPages_NameParsing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		span         string
		paths, names []string
	}{
		{"outbox/claim.go", []string{"outbox/claim.go"}, nil},
		{"internal/engine/lane.go", []string{"internal/engine/lane.go"}, nil},
		{"outbox.NewDispatcher(db, outbox.Config{…})", nil, []string{"outbox.NewDispatcher", "outbox.Config"}},
		{"Dispatcher.Drain", nil, []string{"Dispatcher.Drain"}},
		{"go list -deps ./cmd/worker", []string{"./cmd/worker"}, nil},
		{"postbox_wake", nil, nil},
		{"UPDATE … WHERE id = $1", nil, nil},
		{"EMAIL_CONCURRENCY / WEBHOOK_CONCURRENCY", nil, nil},
		{"/events/<provider>", nil, nil},
	} {
		if got := pathsIn(tc.span); !slices.Equal(got, tc.paths) {
			t.Errorf("pathsIn(%q) = %q, want %q", tc.span, got, tc.paths)
		}
		if got := goNamesIn(tc.span); !slices.Equal(got, tc.names) {
			t.Errorf("goNamesIn(%q) = %q, want %q", tc.span, got, tc.names)
		}
	}
	decls := moduleDecls(t)
	for _, tc := range []struct {
		name     string
		ok, ours bool
	}{
		{"engine.Lane", true, true},
		{"engine.Lane.Run", true, true},
		{"engine.Lane.NoSuchMethod", false, true},
		{"outbox.Config.SecretKeys", true, true},
		{"Tally.Claimed", true, true},
		{"webhook.NoSuchThing", false, true},
		{"river.RecordOutput", false, false},
		{"NoSuchType.Method", false, false},
	} {
		ok, ours := decls.resolve(tc.name)
		if ok != tc.ok || ours != tc.ours {
			t.Errorf("resolve(%q) = %v, %v; want %v, %v", tc.name, ok, ours, tc.ok, tc.ours)
		}
	}
}

type span struct {
	text   string
	offset int
}

// codeSpans returns the page's inline code spans, leaving out fenced
// blocks (the flow diagrams, which sketch rather than name).
func codeSpans(page string) []span {
	var spans []span
	fenced := false
	offset := 0
	for line := range strings.SplitAfterSeq(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		} else if !fenced {
			for _, m := range inlineCode.FindAllStringSubmatchIndex(line, -1) {
				spans = append(spans, span{text: line[m[2]:m[3]], offset: offset + m[2]})
			}
		}
		offset += len(line)
	}
	return spans
}

var (
	inlineCode = regexp.MustCompile("`([^`]+)`")
	// A repository path: words joined by slashes (a leading ./ allowed),
	// or a file name with one of the extensions the repository uses.
	pathToken = regexp.MustCompile(`(?:^|[\s(,])((?:\./)?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+/?|[A-Za-z0-9_-]+\.(?:go|sql|md|yml|yaml|tmpl|json))(?:$|[\s),:])`)
	goToken   = regexp.MustCompile(`\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\b`)
)

func pathsIn(s string) []string {
	var out []string
	for _, m := range pathToken.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// goNamesIn returns the dotted names of s that are not paths.
func goNamesIn(s string) []string {
	if len(pathsIn(s)) > 0 && !strings.ContainsAny(s, "({") {
		return nil
	}
	var out []string
	for _, m := range goToken.FindAllString(s, -1) {
		if strings.ContainsAny(m, "/") || regexp.MustCompile(`\.(go|sql|md|yml|yaml|tmpl|json)$`).MatchString(m) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// decls is every package of the module with what it declares: top-level
// names, and Type.Member for methods and struct fields.
type decls struct {
	pkgs  map[string]map[string]bool // package name and import path suffix → names
	types map[string]map[string]bool // type name → members, over every package
}

// resolve says whether name exists (ok) and whether it is this module's to
// check at all (ours).
func (d decls) resolve(name string) (ok, ours bool) {
	parts := strings.Split(name, ".")
	if names, isPkg := d.pkgs[parts[0]]; isPkg {
		return names[strings.Join(parts[1:], ".")] || (len(parts) == 2 && names[parts[1]]), true
	}
	if members, isType := d.types[parts[0]]; isType && len(parts) == 2 {
		return members[parts[1]], true
	}
	return false, false
}

func moduleDecls(t *testing.T) decls {
	t.Helper()
	d := decls{pkgs: map[string]map[string]bool{}, types: map[string]map[string]bool{}}
	parseModule(t, 0, func(_ string, _ *token.FileSet, f *ast.File) {
		names := d.pkgs[f.Name.Name]
		if names == nil {
			names = map[string]bool{}
			d.pkgs[f.Name.Name] = names
		}
		add := func(typ, member string) {
			names[typ+"."+member] = true
			if d.types[typ] == nil {
				d.types[typ] = map[string]bool{}
			}
			d.types[typ][member] = true
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					names[decl.Name.Name] = true
					continue
				}
				typ := decl.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if idx, ok := typ.(*ast.IndexExpr); ok {
					typ = idx.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					add(id.Name, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range decl.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						if d.types[s.Name.Name] == nil {
							d.types[s.Name.Name] = map[string]bool{}
						}
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, f := range st.Fields.List {
								for _, n := range f.Names {
									add(s.Name.Name, n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	})
	// main packages and the docs package name nothing a page may cite
	// as a package.
	delete(d.pkgs, "main")
	return d
}

// TestDocLinks_Resolve checks the doc links ([Name], [Type.Method],
// [pkg.Name]) in every doc comment of the module's packages: go doc
// renders a link to a name that is gone as plain text, without a word of
// warning, so a package doc can go on sending readers to a method that no
// longer exists.
func TestDocLinks_Resolve(t *testing.T) {
	t.Parallel()
	decls := moduleDecls(t)
	checked := 0
	parseModule(t, parser.ParseComments, func(p string, fset *token.FileSet, f *ast.File) {
		own := decls.pkgs[f.Name.Name]
		for _, doc := range docComments(f) {
			for _, m := range docLink.FindAllStringSubmatchIndex(doc.Text(), -1) {
				link := doc.Text()[m[2]:m[3]]
				if first, _, _ := strings.Cut(link, "."); decls.pkgs[first] == nil && !unicode.IsUpper(rune(first[0])) {
					continue // [i], [n]: an index in prose, not a link
				}
				ok, ours := decls.resolve(link)
				if !strings.Contains(link, ".") || !ours {
					// [Name] and [Type.Member] of the comment's own package.
					ok, ours = own[link], own != nil
				}
				if !ours {
					continue
				}
				checked++
				if !ok {
					t.Errorf("%s: doc link [%s] resolves to nothing the package or the module declares", strings.TrimPrefix(p, repoRoot+"/")+":"+strconv.Itoa(fset.Position(doc.Pos()).Line), link)
				}
			}
		}
	})
	if checked < 30 {
		t.Errorf("only %d doc links checked; the parsing is broken", checked)
	}
}

// docLink is a Go doc link: a bracketed name not followed by "(" or ":"
// (a Markdown-style link or a link definition).
var docLink = regexp.MustCompile(`\[([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\]([^(:]|$)`)

// docComments are the comments go doc renders: the package's and each
// declaration's.
func docComments(f *ast.File) []*ast.CommentGroup {
	docs := []*ast.CommentGroup{f.Doc}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			docs = append(docs, decl.Doc)
		case *ast.GenDecl:
			docs = append(docs, decl.Doc)
			for _, s := range decl.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok {
					docs = append(docs, ts.Doc)
					if st, ok := ts.Type.(*ast.StructType); ok {
						for _, fld := range st.Fields.List {
							docs = append(docs, fld.Doc)
						}
					}
				}
			}
		}
	}
	return slices.DeleteFunc(docs, func(c *ast.CommentGroup) bool { return c == nil })
}

// parseModule parses every non-test Go file of the module (a test's
// comments are not rendered, and its names are no API) and hands each to fn.
func parseModule(t *testing.T, mode parser.Mode, fn func(path string, fset *token.FileSet, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "testdata") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, mode|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(p, fset, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
