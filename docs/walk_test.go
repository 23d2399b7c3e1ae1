package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// walkSection is the ARCHITECTURE.md section that follows one row of each
// transport from its claim to its mark, a table per transport under its
// own heading.
const walkSection = "## A row's path, file by file"

// walkFiles caps the distinct files a walk may pass through: a newcomer
// changing how a row is marked should read no more.
const walkFiles = 10

// walkStep is one row of a walk's table: the function, in its file.
type walkStep struct {
	line int
	file string // `outbox/batch.go`
	fn   string // `batch.Run` or `attemptRow`
}

// walks reads the walk tables of page: heading → steps, in order.
func walks(t *testing.T, page string) map[string][]walkStep {
	t.Helper()
	start := strings.Index(page, walkSection+"\n")
	if start < 0 {
		t.Fatalf("ARCHITECTURE.md has no %q section", walkSection)
	}
	body := page[start+len(walkSection):]
	if end := strings.Index(body, "\n## "); end >= 0 {
		body = body[:end]
	}
	firstLine := strings.Count(page[:start], "\n") + 1
	out := map[string][]walkStep{}
	heading := ""
	for i, line := range strings.Split(body, "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			heading = h
			continue
		}
		cells := strings.Split(line, "|")
		if heading == "" || len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[2]), "`") {
			continue
		}
		out[heading] = append(out[heading], walkStep{
			line: firstLine + i,
			file: strings.Trim(strings.TrimSpace(cells[2]), "`"),
			fn:   strings.Trim(strings.TrimSpace(cells[3]), "`"),
		})
	}
	return out
}

// TestArchitecture_WalkIsTrue holds the walk of each transport to the code:
// every file exists and declares the function named beside it; each step
// after the first is called from a step before it, so the table reads
// forward the way the row goes; and no walk passes through more than
// walkFiles files.
func TestArchitecture_WalkIsTrue(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	all := walks(t, string(src))
	if len(all) != 2 {
		t.Fatalf("%q holds %d walks, want one per transport (email, webhook)", walkSection, len(all))
	}
	for heading, steps := range all {
		files := map[string]bool{}
		var bodies []*ast.FuncDecl
		for i, s := range steps {
			files[s.file] = true
			decl := declIn(t, s.file, s.fn)
			if decl == nil {
				t.Errorf("ARCHITECTURE.md:%d (%s): %s declares no %s", s.line, heading, s.file, s.fn)
				bodies = append(bodies, nil)
				continue
			}
			if i > 0 && !calledFrom(bodies, lastPart(s.fn)) {
				t.Errorf("ARCHITECTURE.md:%d (%s): no earlier step calls %s: the walk does not read forward", s.line, heading, s.fn)
			}
			bodies = append(bodies, decl)
		}
		if len(files) > walkFiles {
			t.Errorf("%s: a row passes through %d files from claim to mark, want at most %d", heading, len(files), walkFiles)
		}
		if len(steps) < 3 {
			t.Errorf("%s: %d steps; the table parsing is broken", heading, len(steps))
		}
	}
}

// declIn finds fn ("Type.Method" or "Func") declared in file.
func declIn(t *testing.T, file, fn string) *ast.FuncDecl {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot, filepath.FromSlash(file)), nil, 0)
	if err != nil {
		return nil
	}
	recv, name, isMethod := strings.Cut(fn, ".")
	if !isMethod {
		name, recv = recv, ""
	}
	for _, d := range f.Decls {
		decl, ok := d.(*ast.FuncDecl)
		if !ok || decl.Name.Name != name {
			continue
		}
		if (decl.Recv == nil) != (recv == "") {
			continue
		}
		if recv == "" || receiverType(decl) == recv {
			return decl
		}
	}
	return nil
}

func receiverType(decl *ast.FuncDecl) string {
	expr := decl.Recv.List[0].Type
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	if idx, ok := expr.(*ast.IndexExpr); ok { // a generic receiver
		expr = idx.X
	}
	if id, ok := expr.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func lastPart(fn string) string {
	return fn[strings.LastIndex(fn, ".")+1:]
}

// calledFrom reports whether any of bodies names name as a function or
// method, called or passed on (a method value started on a goroutine).
func calledFrom(bodies []*ast.FuncDecl, name string) bool {
	for _, decl := range bodies {
		if decl == nil || decl.Body == nil {
			continue
		}
		found := false
		ast.Inspect(decl.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				found = found || n.Sel.Name == name
			case *ast.Ident:
				found = found || n.Name == name
			}
			return !found
		})
		if found {
			return true
		}
	}
	return false
}
