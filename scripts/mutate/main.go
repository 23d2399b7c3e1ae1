// Command mutate proves that each mechanism of the transport has a test that
// fails when the mechanism is removed. Each section of the design
// (docs/design/outbox-transport.md) names the mutations that prove it.
//
// It first runs every named test on an unmutated scratch copy (the
// baseline): a test that does not pass there proves nothing, so the run
// aborts. Then, for every registered mutation, it copies the tree to a
// scratch directory, applies one exact text replacement, runs the named test
// with go test -json, and expects that test to fail. A mutation counts as
// killed only when the named test itself reports "fail"; a timeout, a
// package that fails before the test runs (a database outage in TestMain),
// a skip, or any other failure is INCONCLUSIVE. It prints a table
// mutation → test and exits non-zero if any mutation survives (its test
// stays green), is inconclusive, or no longer applies (its text is gone from
// the source, so the table has gone stale).
//
//	go run ./scripts/mutate            # every mutation
//	go run ./scripts/mutate -run scrub # those whose name matches
//	go run ./scripts/mutate -since REV -share 2/5
//	                                   # what CI runs: the mutations a change since REV
//	                                   # touches, and one rotating fifth of the rest
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	list := flag.Bool("list", false, "print the selected mutations (package, test, file, name) and exit")
	since := flag.String("since", "", "with -share: only the mutations whose target file or test file changed since this revision, and the share's")
	shareFlag := flag.String("share", "", "with -since: K/N, the rotating share of the other mutations to run as well")
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
	if (*since == "") != (*shareFlag == "") {
		fail("-since and -share go together")
	}
	if *since != "" {
		s, err := parseShare(*shareFlag)
		if err != nil {
			fail("%v", err)
		}
		c, err := changedSince(root, *since)
		if err != nil {
			// Without the base, nothing says what the change touched:
			// the whole selection runs rather than too little.
			fmt.Fprintf(os.Stderr, "mutate: %v; running all %d selected mutations\n", err, len(selected))
		} else {
			all := len(selected)
			var touched, rotated int
			selected, touched, rotated = pick(selected, c, s)
			fmt.Fprintf(os.Stderr, "mutate: %d of %d mutations: %d touched by the change since %s, %d in share %d/%d\n",
				len(selected), all, touched, *since, rotated, s.index, s.of)
		}
	}
	if *list {
		for _, m := range selected {
			fmt.Printf("%s\t%s\t%s\t%s\n", m.Pkg, m.Test, m.File, m.Name)
		}
		return
	}
	slots := make(chan struct{}, max(*parallel, 1))
	took, err := baseline(root, selected, *timeout, slots)
	if err != nil {
		fail("baseline (unmutated tree): %v\nno mutation was tried: a test that does not pass unmutated cannot kill anything", err)
	}

	results := make([]string, len(selected))
	var wg sync.WaitGroup
	for _, i := range longestFirst(selected, took) {
		m := selected[i]
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			var t timing
			results[i], t = apply(root, m, *timeout)
			fmt.Fprintf(os.Stderr, "%-8s %s %s\n", firstLine(results[i]), t, m.Name)
		}()
	}
	wg.Wait()

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTATION\tTEST\tRESULT")
	survivors := 0
	for i, m := range selected {
		if results[i] != killed {
			survivors++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, m.Test, firstLine(results[i]))
	}
	tw.Flush()
	for i, m := range selected {
		if results[i] != killed && strings.Contains(results[i], "\n") {
			fmt.Fprintf(os.Stderr, "\n--- %s\n%s\n", m.Name, results[i])
		}
	}
	if survivors > 0 {
		fail("%d mutation(s) survived, were inconclusive, or did not apply", survivors)
	}
	fmt.Println("no survivors")
}

const killed = "killed"

// apply runs one mutation in a scratch copy and reports killed, SURVIVED,
// INCONCLUSIVE (the named test did not fail by itself: a timeout, a package
// that failed before it ran, a skip, another failure), or STALE (the text
// to replace is not in the file exactly once, the tree no longer builds, or
// the test is gone).
func apply(root string, m Mutation, timeout time.Duration) (string, timing) {
	var t timing
	src, err := os.ReadFile(filepath.Join(root, m.File))
	if err != nil {
		return "STALE: " + err.Error(), t
	}
	if n := bytes.Count(src, []byte(m.Find)); n != 1 {
		return fmt.Sprintf("STALE: text found %d times", n), t
	}
	began := time.Now()
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
	t.copy = time.Since(began)
	testRE, err := regexp.Compile("^(" + m.Test + ")$")
	if err != nil {
		return "STALE: test pattern: " + err.Error(), t
	}
	r := goTest(scratch, m.Pkg, m.Test, timeout)
	t.wall, t.ran, t.cpu = r.wall, r.ran, r.cpu
	return r.verdict(testRE), t
}

// timing is where one mutation's time went, printed beside its verdict so
// that a slow matrix shows its slow entries.
type timing struct{ copy, wall, ran, cpu time.Duration }

func (t timing) String() string {
	return fmt.Sprintf("%5.1fs (copy %.1fs, build %.1fs, run %.1fs, cpu %.1fs)",
		(t.copy + t.wall).Seconds(), t.copy.Seconds(), (t.wall - t.ran).Seconds(), t.ran.Seconds(), t.cpu.Seconds())
}

// run is one go test -json invocation, parsed.
type run struct {
	out         []byte                   // everything go test printed
	err         error                    // its exit status
	outerExpiry bool                     // our own deadline killed it
	timedOut    bool                     // the test binary's -timeout panic
	buildFailed bool                     // the package (or a dependency) does not build
	tests       map[string]string        // top-level test → final action (pass, fail, skip)
	took        map[string]time.Duration // top-level test → its elapsed time
	crashedIn   string                   // the test running when the binary died of a panic
	wall        time.Duration            // go test from start to exit: compiling, linking, running
	ran         time.Duration            // the test binary's own run (go test -json's package Elapsed)
	cpu         time.Duration            // user+system time of go test and every process it waited for
}

// buildFlags are the go command's flags for every build in a scratch tree:
// go test's own, and the go build a test runs to get a binary (cmd/worker's
// workerBinary, docs' commands), which inherits them through GOFLAGS.
//
//   - -trimpath keys the build cache by module path, not by the scratch
//     directory, so packages a mutation leaves alone come from the cache in
//     every scratch tree; without it a nested go build recompiles the
//     whole module in each one.
//   - -vet=off: go test's vet pass can only fail the package, never the
//     named test, so it cannot kill a mutation (CI runs go vet itself).
//   - -ldflags=-w leaves out DWARF, the larger part of each link; stacks,
//     panics and runtime.Caller read the pclntab, which stays.
var buildFlags = []string{"-trimpath", "-vet=off", "-ldflags=-w"}

// scratchEnv is the environment of go test in a scratch tree: this one,
// with buildFlags added to the GOFLAGS the go command would otherwise use
// (a GOFLAGS variable replaces go env -w's setting rather than adding to it).
var scratchEnv = sync.OnceValue(func() []string {
	out, err := exec.Command("go", "env", "GOFLAGS").Output()
	if err != nil {
		fail("go env GOFLAGS: %v", err)
	}
	flags := strings.Join(append(strings.Fields(string(out)), buildFlags...), " ")
	return append(os.Environ(), "GOFLAGS="+flags)
})

// goTest runs go test -json -run ^(pattern)$ pkg in dir.
func goTest(dir, pkg, pattern string, timeout time.Duration) run {
	// -timeout bounds the test binary; the context is only the backstop
	// for a wedged go command, and covers the compile too, which on a busy
	// machine can take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-json", "-count=1", "-timeout", timeout.String(),
		"-run", "^("+pattern+")$", pkg)
	cmd.Dir = dir
	cmd.Env = scratchEnv()
	began := time.Now()
	out, err := cmd.CombinedOutput()
	r := run{out: out, err: err, outerExpiry: errors.Is(ctx.Err(), context.DeadlineExceeded), tests: map[string]string{}, took: map[string]time.Duration{}, wall: time.Since(began)}
	if cmd.ProcessState != nil {
		r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev struct {
			Action, Test, Output, FailedBuild string
			Elapsed                           float64
		}
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			// Not an event: go's own text (older build-failure output).
			if bytes.Contains(line, []byte("[build failed]")) || bytes.Contains(line, []byte("[setup failed]")) {
				r.buildFailed = true
			}
			continue
		}
		switch {
		case ev.Action == "build-fail" || ev.FailedBuild != "":
			r.buildFailed = true
		case ev.Action == "output" && strings.Contains(ev.Output, "panic: test timed out after"):
			r.timedOut = true
		case ev.Action == "output" && ev.Test != "" && strings.HasPrefix(ev.Output, "panic: "):
			// A panic the test binary died of, printed while this test
			// ran: a goroutine the test started panicked, unrecovered.
			r.crashedIn = ev.Test
		case ev.Action == "output" && (strings.Contains(ev.Output, "[build failed]") || strings.Contains(ev.Output, "[setup failed]")):
			r.buildFailed = true
		}
		if ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail") {
			r.ran = time.Duration(ev.Elapsed * float64(time.Second))
		}
		if ev.Test != "" && !strings.Contains(ev.Test, "/") {
			switch ev.Action {
			case "pass", "fail", "skip":
				r.tests[ev.Test] = ev.Action
				r.took[ev.Test] = time.Duration(ev.Elapsed * float64(time.Second))
			}
		}
	}
	return r
}

// named returns the final actions of the top-level tests testRE matches.
func (r run) named(testRE *regexp.Regexp) map[string]string {
	got := map[string]string{}
	for name, action := range r.tests {
		if testRE.MatchString(name) {
			got[name] = action
		}
	}
	return got
}

// verdict classifies a run of a mutated tree.
func (r run) verdict(testRE *regexp.Regexp) string {
	named := r.named(testRE)
	var failed, skipped []string
	for name, action := range named {
		switch action {
		case "fail":
			failed = append(failed, name)
		case "skip":
			skipped = append(skipped, name)
		}
	}
	switch {
	case r.buildFailed:
		return "STALE: mutated tree does not build:\n" + string(r.out)
	case r.timedOut || r.outerExpiry:
		return "INCONCLUSIVE: timed out (a hang is not a kill: make the test fail on the mechanism):\n" + tail(r.out)
	case len(failed) > 0:
		return killed
	case r.crashedIn != "" && testRE.MatchString(strings.SplitN(r.crashedIn, "/", 2)[0]):
		// go test -json reports no "fail" for a test whose binary died;
		// the panic printed while it ran (and only named tests run) is it
		// failing.
		return killed
	case len(named) == 0 && r.err == nil:
		return "STALE: test " + testRE.String() + " not found"
	case len(named) == 0:
		return "INCONCLUSIVE: the package failed before the test ran (TestMain, an outage?):\n" + tail(r.out)
	case len(skipped) > 0:
		return fmt.Sprintf("INCONCLUSIVE: %s skipped:\n%s", strings.Join(skipped, ", "), tail(r.out))
	case r.err != nil:
		return "INCONCLUSIVE: the test passed but go test failed (" + r.err.Error() + "):\n" + tail(r.out)
	default:
		return "SURVIVED"
	}
}

// baseline runs every selected mutation's test on one unmutated scratch
// copy, one go test per package, and returns an error naming each test that
// does not pass there (or cannot be found). It returns how long each test
// took, per package, for longestFirst.
func baseline(root string, selected []Mutation, timeout time.Duration, slots chan struct{}) (map[string]map[string]time.Duration, error) {
	if len(selected) == 0 {
		return nil, nil
	}
	scratch, err := os.MkdirTemp("", "postbox-mutate-baseline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	if err := copyTree(root, scratch); err != nil {
		return nil, fmt.Errorf("copy tree: %w", err)
	}
	byPkg := map[string][]string{}
	var pkgs []string
	for _, m := range selected {
		if _, ok := byPkg[m.Pkg]; !ok {
			pkgs = append(pkgs, m.Pkg)
		}
		if !slices.Contains(byPkg[m.Pkg], m.Test) {
			byPkg[m.Pkg] = append(byPkg[m.Pkg], m.Test)
		}
	}
	// The packages with the most named tests go first: they take longest,
	// and the slots should not sit idle behind one of them at the end.
	order := slices.Clone(pkgs)
	slices.SortStableFunc(order, func(a, b string) int { return len(byPkg[b]) - len(byPkg[a]) })
	runs := make([]run, len(pkgs))
	var wg sync.WaitGroup
	for _, pkg := range order {
		i := slices.Index(pkgs, pkg)
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			runs[i] = goTest(scratch, pkg, strings.Join(byPkg[pkg], "|"), timeout)
			fmt.Fprintf(os.Stderr, "baseline %s %.1fs (build %.1fs, run %.1fs)\n", pkg,
				runs[i].wall.Seconds(), (runs[i].wall - runs[i].ran).Seconds(), runs[i].ran.Seconds())
		}()
	}
	wg.Wait()

	var problems []string
	for i, pkg := range pkgs {
		r := runs[i]
		if r.buildFailed || r.timedOut || r.outerExpiry {
			problems = append(problems, fmt.Sprintf("%s: unmutated package does not build or timed out:\n%s", pkg, tail(r.out)))
			continue
		}
		for _, pattern := range byPkg[pkg] {
			testRE, err := regexp.Compile("^(" + pattern + ")$")
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s %s: %v", pkg, pattern, err))
				continue
			}
			named := r.named(testRE)
			if len(named) == 0 {
				problems = append(problems, fmt.Sprintf("%s %s: no such test ran", pkg, pattern))
			}
			for name, action := range named {
				if action != "pass" {
					problems = append(problems, fmt.Sprintf("%s %s: %s unmutated; it printed:\n%s", pkg, name, action, testOutput(r.out, name)))
				}
			}
		}
		if len(problems) > 0 && r.err != nil {
			problems = append(problems, fmt.Sprintf("%s output:\n%s", pkg, tail(r.out)))
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "\n"))
	}
	took := map[string]map[string]time.Duration{}
	for i, pkg := range pkgs {
		took[pkg] = runs[i].took
	}
	return took, nil
}

// longestFirst orders the selected mutations (by index) so the ones whose
// tests took longest in the baseline start first: run in the order they
// are registered, a long test started near the end of the matrix holds it
// up while the other slots sit idle. A mutated test may run longer than it
// did unmutated (waiting out its deadline), but the long ones are long
// either way; the order of the report is the registration order still.
func longestFirst(selected []Mutation, took map[string]map[string]time.Duration) []int {
	cost := make([]time.Duration, len(selected))
	for i, m := range selected {
		testRE, err := regexp.Compile("^(" + m.Test + ")$")
		if err != nil {
			continue // apply reports it
		}
		for name, d := range took[m.Pkg] {
			if testRE.MatchString(name) {
				cost[i] += d
			}
		}
	}
	order := make([]int, len(selected))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(cost[b], cost[a]) })
	return order
}

// tail is the last lines of go test's output, decoded from its events, for
// a report a human can read.
func tail(out []byte) string {
	var text []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Action != "" {
			if ev.Output != "" {
				text = append(text, strings.TrimRight(ev.Output, "\n"))
			}
			continue
		}
		text = append(text, sc.Text())
	}
	if len(text) > 40 {
		text = text[len(text)-40:]
	}
	return strings.Join(text, "\n")
}

// testOutput is what test (and its subtests) printed, its last 60 lines:
// the reason a baseline test failed, which the package's tail, another
// test's output, rarely shows.
func testOutput(out []byte, test string) string {
	var text []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Action != "output" {
			continue
		}
		if ev.Test == test || strings.HasPrefix(ev.Test, test+"/") {
			text = append(text, strings.TrimRight(ev.Output, "\n"))
		}
	}
	if len(text) > 60 {
		text = text[len(text)-60:]
	}
	return strings.Join(text, "\n")
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
			// A "_" folder under testdata is data, not Go source the tool
			// ignores: a template directory's _shared/, for one.
			underTestdata := strings.Contains(filepath.ToSlash(rel)+"/", "testdata/")
			if rel != "." && (d.Name() == ".git" || strings.HasPrefix(d.Name(), "_") && !underTestdata) {
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
