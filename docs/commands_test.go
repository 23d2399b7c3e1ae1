package docs

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/harness/gobuild"
)

// docCommand is one `go run` or `go test` command a page gives.
type docCommand struct {
	where string // file:line
	args  []string
}

// TestCommandsInTheDocs reads every `go run ./…` and `go test …` command in
// the README and docs/*.md — in code blocks and inline — and checks it
// against the code: a go run names a program of this module whose flags
// (and, for the worker, subcommands) include every one the command passes;
// a go test names packages whose tests (or benchmarks) match its -run (or
// -bench) pattern. Commands with a placeholder (…, [, <) are skipped.
func TestCommandsInTheDocs(t *testing.T) {
	t.Parallel()
	cmds := docCommands(t)
	if len(cmds) < 20 {
		t.Fatalf("found only %d commands in the docs; the extraction is broken", len(cmds))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := gobuild.ModuleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	built := map[string]string{}
	help := map[string]string{} // program and subcommand → its help text
	helpOf := func(c docCommand, prog string, sub []string) string {
		t.Helper()
		if built[prog] == "" {
			if err := gobuild.Build(ctx, bin, prog); err != nil {
				t.Fatalf("%s: %v", c.where, err)
			}
			built[prog] = filepath.Join(bin, filepath.Base(prog))
		}
		key := prog + " " + strings.Join(sub, " ")
		if h, ok := help[key]; ok {
			return h
		}
		cmd := exec.CommandContext(ctx, built[prog], append(slices.Clone(sub), "-h")...)
		cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://docs-check.invalid/x")
		out, _ := cmd.CombinedOutput() // -h exits 0 or 2 by convention; the text is what counts
		help[key] = string(out)
		return help[key]
	}
	listed := map[string]string{}
	list := func(c docCommand, pkg, pattern string) string {
		t.Helper()
		key := pkg + " " + pattern
		if l, ok := listed[key]; ok {
			return l
		}
		cmd := exec.CommandContext(ctx, "go", "test", "-list", pattern, pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: go test -list %s %s: %v\n%s", c.where, pattern, pkg, err, out)
		}
		listed[key] = string(out)
		return listed[key]
	}
	for _, c := range cmds {
		switch c.args[1] {
		case "run":
			prog := c.args[2]
			var sub, flags []string
			for _, a := range c.args[3:] {
				switch {
				case strings.HasPrefix(a, "-"):
					name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
					flags = append(flags, name)
				case len(flags) == 0 && prog == "./cmd/worker":
					sub = append(sub, a)
				}
			}
			h := helpOf(c, prog, sub)
			if prog == "./cmd/worker" && len(sub) > 0 && strings.Contains(h, "unknown command") {
				t.Errorf("%s: worker has no command %q:\n%s", c.where, strings.Join(sub, " "), h)
			}
			for _, f := range flags {
				if !regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(f) + `\b`).MatchString(h) {
					t.Errorf("%s: %s %s has no flag -%s", c.where, prog, strings.Join(sub, " "), f)
				}
			}
		case "test":
			var pkgs []string
			run, bench := "", ""
			for i := 2; i < len(c.args); i++ {
				switch a := c.args[i]; {
				case a == "-run" && i+1 < len(c.args):
					i++
					run = c.args[i]
				case a == "-bench" && i+1 < len(c.args):
					i++
					bench = c.args[i]
				case strings.HasPrefix(a, "./"):
					pkgs = append(pkgs, a)
				}
			}
			for _, pkg := range pkgs {
				if strings.Contains(pkg, "...") {
					continue // the whole suite: what this test runs inside
				}
				switch {
				case bench != "":
					if !strings.Contains(list(c, pkg, bench), "Benchmark") {
						t.Errorf("%s: no benchmark in %s matches -bench %s", c.where, pkg, bench)
					}
				case run != "" && run != "^$":
					if !regexp.MustCompile(`(?m)^(Test|Example)`).MatchString(list(c, pkg, run)) {
						t.Errorf("%s: no test in %s matches -run %s: the command would run nothing and print ok", c.where, pkg, run)
					}
				default:
					if !regexp.MustCompile(`(?m)^(Test|Example)`).MatchString(list(c, pkg, ".")) {
						t.Errorf("%s: %s has no tests", c.where, pkg)
					}
				}
			}
		}
	}
}

// docCommands extracts the commands from README.md and docs/*.md.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	inline := regexp.MustCompile("`(go (?:run|test) [^`]+)`")
	var out []docCommand
	for _, page := range pages {
		f, err := os.Open(page)
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(f)
		fenced := false
		for n := 1; s.Scan(); n++ {
			line := s.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			var texts []string
			if fenced {
				texts = []string{strings.TrimSpace(line)}
			} else {
				for _, m := range inline.FindAllStringSubmatch(line, -1) {
					texts = append(texts, m[1])
				}
			}
			for _, text := range texts {
				if c, ok := parseCommand(text); ok {
					out = append(out, docCommand{where: filepath.Base(page) + ":" + strconv.Itoa(n), args: c})
				}
			}
		}
		f.Close()
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// parseCommand splits a command line into arguments, dropping a trailing
// comment and the quotes around an argument; ok is false for anything but
// a concrete `go run ./…` or `go test` command.
func parseCommand(text string) (args []string, ok bool) {
	text, _, _ = strings.Cut(text, " #")
	if !strings.HasPrefix(text, "go run ./") && !strings.HasPrefix(text, "go test ") {
		return nil, false
	}
	if strings.ContainsAny(text, "…[<>") {
		return nil, false
	}
	for _, a := range strings.Fields(text) {
		args = append(args, strings.Trim(a, `'"`))
	}
	return args, len(args) >= 3
}
