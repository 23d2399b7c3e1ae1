// Command mutate proves that each mechanism of ADR-072 has a test that fails
// when the mechanism is removed.
//
// For every registered mutation it copies the tree to a scratch directory,
// applies one exact text replacement, runs the named test, and expects it to
// fail. It prints a table mutation → test and exits non-zero if any mutation
// survives (its test stays green) or no longer applies (its text is gone from
// the source, so the table has gone stale).
//
//	go run ./scripts/mutate            # every mutation
//	go run ./scripts/mutate -run scrub # those whose name matches
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Mutation removes or breaks one mechanism.
type Mutation struct {
	Name    string // what is removed, e.g. "claim: drop SKIP LOCKED"
	File    string // path from the repository root
	Find    string // exact text; must occur exactly once in File
	Replace string
	Pkg     string // package to test, e.g. "./outbox/"
	Test    string // test (regexp for go test -run) that must turn red
}

var mutations []Mutation

func register(m ...Mutation) { mutations = append(mutations, m...) }

func main() {
	run := flag.String("run", "", "only mutations whose name matches this regexp")
	timeout := flag.Duration("timeout", 5*time.Minute, "per-mutation test timeout")
	parallel := flag.Int("parallel", 3, "mutations tested at once (each in its own scratch tree)")
	flag.Parse()

	filter, err := regexp.Compile(*run)
	if err != nil {
		fail("-run: %v", err)
	}
	root, err := os.Getwd()
	if err != nil {
		fail("getwd: %v", err)
	}

	var selected []Mutation
	for _, m := range mutations {
		if filter.MatchString(m.Name) {
			selected = append(selected, m)
		}
	}
	results := make([]string, len(selected))
	var wg sync.WaitGroup
	slots := make(chan struct{}, max(*parallel, 1))
	for i, m := range selected {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			results[i] = apply(root, m, *timeout)
			fmt.Fprintf(os.Stderr, "%-8s %s\n", firstLine(results[i]), m.Name)
		}()
	}
	wg.Wait()

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTATION\tTEST\tRESULT")
	survivors := 0
	for i, m := range selected {
		if results[i] != "killed" {
			survivors++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, m.Test, results[i])
	}
	tw.Flush()
	if survivors > 0 {
		fail("%d mutation(s) survived or did not apply", survivors)
	}
	fmt.Println("no survivors")
}

// apply runs one mutation in a scratch copy and reports killed, SURVIVED, or
// STALE (the text to replace is not in the file exactly once).
func apply(root string, m Mutation, timeout time.Duration) string {
	src, err := os.ReadFile(filepath.Join(root, m.File))
	if err != nil {
		return "STALE: " + err.Error()
	}
	if n := bytes.Count(src, []byte(m.Find)); n != 1 {
		return fmt.Sprintf("STALE: text found %d times", n)
	}
	scratch, err := os.MkdirTemp("", "postbox-mutate-")
	if err != nil {
		fail("mkdtemp: %v", err)
	}
	defer os.RemoveAll(scratch)
	if err := copyTree(root, scratch); err != nil {
		fail("copy tree: %v", err)
	}
	mutated := bytes.Replace(src, []byte(m.Find), []byte(m.Replace), 1)
	if err := os.WriteFile(filepath.Join(scratch, m.File), mutated, 0o644); err != nil {
		fail("write mutation: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-trimpath", "-count=1", "-timeout", timeout.String(),
		"-run", "^("+m.Test+")$", m.Pkg)
	cmd.Dir = scratch
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil && bytes.Contains(out, []byte("no tests to run")):
		return "STALE: test " + m.Test + " not found"
	case err == nil:
		return "SURVIVED"
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return "STALE: mutated tree does not build:\n" + string(out)
	default:
		return "killed"
	}
}

// copyTree copies the source tree, skipping .git and anything ignored by the
// go tool (testdata is kept: tests need it).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if rel != "." && (d.Name() == ".git" || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm())
	})
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mutate: "+format+"\n", args...)
	os.Exit(1)
}
