package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// goExampleMark precedes each Go block of the README that is compiled
// code: `<!-- path FuncName: … -->`, the file (from the repository root)
// and the function the block is, word for word.
var goExampleMark = regexp.MustCompile("(?m)^<!-- (\\S+\\.go) ([A-Za-z_][A-Za-z0-9_]*)\\b.*-->\n```go\n((?s:.*?))```\n")

// TestReadme_GoExamplesAreCompiled checks that each marked Go block of the
// README is the source of the function its mark names, a function of an
// example test that compiles and runs with the suite: the first code a
// newcomer reads can neither stop compiling nor drift from what the
// example proves.
func TestReadme_GoExamplesAreCompiled(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	marks := goExampleMark.FindAllStringSubmatch(string(readme), -1)
	if len(marks) == 0 {
		t.Fatal("README.md has no marked Go block (<!-- path.go FuncName … --> before ```go); its Go example is compiled nowhere")
	}
	for _, m := range marks {
		path, name, block := m[1], m[2], m[3]
		src, err := funcSource(filepath.Join(repoRoot, filepath.FromSlash(path)), name)
		if err != nil {
			t.Errorf("README.md's Go block marked %s %s: %v", path, name, err)
			continue
		}
		if block != src+"\n" {
			t.Errorf("README.md's Go block differs from %s in %s; copy the function into the README:\n--- README.md\n%s--- %s\n%s",
				name, path, block, path, src)
		}
	}
}

// funcSource returns the source text of the top-level function name in
// the Go file path, from `func` to its closing brace.
func funcSource(path, name string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == name {
			return string(src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset]), nil
		}
	}
	return "", fmt.Errorf("the file declares no function %s", name)
}
