package docs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/internal/tooling/harness/gobuild"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/mailpittest"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestQuickStart runs the README's quick start, its shell block word for
// word, one step after another as a user pastes them: `export` lines hold
// for the steps after them, a step ending in & runs in the background
// until the test ends, and a heredoc belongs to its step. It substitutes
// only what a test must (quickStartSubstitutions):
//
//   - the URL of `export DATABASE_URL=…`: an empty scratch database, which
//     the block's `worker migrate up` migrates;
//   - the Mailpit lines (`go install` and its start): Mailpit is started by
//     mailpittest, the binary that same `go install` line put in place, on
//     free ports; `SMTP_PORT=1025` becomes its SMTP port;
//   - `go run ./cmd/worker`: the worker built once from this checkout, the
//     same code without a build per step;
//
// and sets HTTP_ADDR to a free port (the worker's 8080 may be another
// test's) and adds the Postgres binaries to PATH, for psql. The block's
// last step, `worker show`, runs until it says the email was sent — a user
// who runs it while the worker boots sees PENDING and runs it again — and
// the email must be in Mailpit.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.EmptyURL(t)
	mailpit := mailpittest.Start(t, mailpittest.Binary(t))
	path := psqlPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := gobuild.ModuleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := gobuild.Worker(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	httpPort, err := pgserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}

	block, where := quickStartBlock(t)
	script, err := substitute(block, quickStartSubstitutions(dbURL, worker, mailpit.SMTPPort))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	steps := shellSteps(script)
	if len(steps) < 4 || steps[len(steps)-1].background {
		t.Fatalf("%s: the quick start parsed into %d steps, the last one in the background: the parsing is broken\n%s", where, len(steps), script)
	}
	env := append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		// The quick start's own settings, and nothing the runner set.
		return strings.HasPrefix(name, "SMTP_") || strings.HasPrefix(name, "DATABASE_") ||
			name == "HTTP_ADDR" || name == "PATH" || name == "APP_ENV"
	}), "HTTP_ADDR=127.0.0.1:"+strconv.Itoa(httpPort), "PATH="+path)

	var exports []string // the export lines so far, ahead of every later step
	var background []*backgroundStep
	for _, s := range steps[:len(steps)-1] {
		switch {
		case strings.HasPrefix(s.text, "export "):
			exports = append(exports, s.text)
		case s.background:
			background = append(background, startBackground(t, root, env, exports, s))
		default:
			if out, err := shell(ctx, root, env, exports, s.text).CombinedOutput(); err != nil {
				t.Fatalf("%s: step %q: %v\n%s%s", where, s.text, err, out, logsOf(background))
			}
		}
	}

	// The first attempt must send it: an attempt that failed (show prints
	// the row's last error on a line of its own) ends the wait at once.
	failedAttempt := regexp.MustCompile(`(?m)^\s*last error: `)
	show := steps[len(steps)-1]
	var last string
	told := eventually.Within(2*time.Minute, func() bool {
		for _, b := range background {
			if b.exited() {
				t.Fatalf("%s: %q exited while the quick start ran\n%s", where, b.text, b.out)
			}
		}
		out, err := shell(ctx, root, env, exports, show.text).CombinedOutput()
		last = fmt.Sprintf("%s\n(exit: %v)", out, err)
		return err == nil && (strings.Contains(string(out), "DISPATCHED") || failedAttempt.Match(out))
	})
	if !told || !strings.Contains(last, "DISPATCHED") {
		t.Fatalf("%s: %q does not say DISPATCHED; its last output:\n%s%s", where, show.text, last, logsOf(background))
	}
	var inbox struct {
		Messages []struct {
			Subject string
			To      []struct{ Address string }
		}
	}
	mailpit.WaitForMessages(t, 1, &inbox)
	if m := inbox.Messages[0]; m.Subject != "Hi" || len(m.To) != 1 || m.To[0].Address != "ada@example.com" {
		t.Errorf("Mailpit holds %+v; want the quick start's email, \"Hi\" to ada@example.com", inbox.Messages)
	}
}

// quickStartBlock returns the first sh block under the README's
// "## Quick start" heading, and where it starts.
func quickStartBlock(t *testing.T) (block, where string) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^## Quick start.*?^```sh\n(.*?)^```$").FindSubmatchIndex(readme)
	if m == nil {
		t.Fatal("README.md has no sh block under a \"## Quick start\" heading")
	}
	return string(readme[m[2]:m[3]]), "README.md:" + strconv.Itoa(lineOf(readme, m[2]))
}

// substitution replaces what matches pattern with with; it must match
// exactly once, or at least once when many, so a README that drops or
// doubles the text cannot run as something else than what it says.
type substitution struct {
	pattern *regexp.Regexp
	with    string
	many    bool
}

// quickStartSubstitutions are the only changes TestQuickStart makes to the
// README's block (see its doc).
func quickStartSubstitutions(dbURL, worker string, smtpPort int) []substitution {
	return []substitution{
		{pattern: regexp.MustCompile(`(?m)^export DATABASE_URL='[^']*'$`), with: "export DATABASE_URL='" + dbURL + "'"},
		{pattern: regexp.MustCompile(`(?m)^go install github\.com/axllent/mailpit@\S+\n`)},
		{pattern: regexp.MustCompile(`(?m)^[^\n]*/mailpit"? &\n`)},
		{pattern: regexp.MustCompile(`\bSMTP_PORT=1025\b`), with: "SMTP_PORT=" + strconv.Itoa(smtpPort)},
		{pattern: regexp.MustCompile(`\bgo run \./cmd/worker\b`), with: worker, many: true},
	}
}

func substitute(block string, subs []substitution) (string, error) {
	for _, s := range subs {
		n := len(s.pattern.FindAllStringIndex(block, -1))
		if n == 0 || (n > 1 && !s.many) {
			return "", fmt.Errorf("the quick start holds %d matches of %s, the text TestQuickStart substitutes", n, s.pattern)
		}
		block = s.pattern.ReplaceAllLiteralString(block, s.with)
	}
	return block, nil
}

// shellStep is one command of a shell block.
type shellStep struct {
	text       string
	background bool // it ends with &
}

// shellSteps splits a shell block into its commands: a line, with the
// lines a trailing backslash or a heredoc (<<'WORD' … WORD) carries;
// blank lines and comments are dropped.
func shellSteps(block string) []shellStep {
	heredoc := regexp.MustCompile(`<<-?'?([A-Za-z_]+)'?`)
	var steps []shellStep
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		text := lines[i]
		if t := strings.TrimSpace(text); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
			i++
			text += "\n" + lines[i]
		}
		if m := heredoc.FindStringSubmatch(text); m != nil {
			for i+1 < len(lines) {
				i++
				text += "\n" + lines[i]
				if lines[i] == m[1] {
					break
				}
			}
		}
		bg := strings.HasSuffix(text, "&") && !strings.HasSuffix(text, "&&")
		steps = append(steps, shellStep{text: strings.TrimSpace(strings.TrimSuffix(text, "&")), background: bg})
	}
	return steps
}

// shell runs text with bash after the export lines, in its own process
// group, so a background step's children stop with it.
func shell(ctx context.Context, dir string, env, exports []string, text string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-euc", strings.Join(append(slices.Clone(exports), text), "\n"))
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// backgroundStep is a step that runs until the test ends.
type backgroundStep struct {
	text string
	out  *logbuf.Buffer
	done chan struct{}
}

func (b *backgroundStep) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// startBackground starts s and stops it when the test ends as a user's
// Ctrl-C would, with a signal to its process group (SIGTERM: the worker
// drains, then exits), killing it if it has not exited a minute later.
func startBackground(t *testing.T, dir string, env, exports []string, s shellStep) *backgroundStep {
	t.Helper()
	b := &backgroundStep{text: s.text, out: &logbuf.Buffer{}, done: make(chan struct{})}
	cmd := shell(context.Background(), dir, env, exports, s.text)
	cmd.Stdout, cmd.Stderr = b.out, b.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", s.text, err)
	}
	go func() { _ = cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(time.Minute):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
			t.Errorf("%q did not stop within a minute of SIGTERM\n%s", s.text, b.out)
		}
	})
	return b
}

func logsOf(steps []*backgroundStep) string {
	var s strings.Builder
	for _, b := range steps {
		fmt.Fprintf(&s, "\n--- %s\n%s", b.text, b.out)
	}
	return s.String()
}

// psqlPath returns PATH with the Postgres binaries' directory added when
// PATH has no psql, and skips the test (fails it in CI) when there is none.
func psqlPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("PATH")
	if _, err := exec.LookPath("psql"); err == nil {
		return path
	}
	if dir, err := pgserver.BinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "psql")); err == nil {
			return path + string(filepath.ListSeparator) + dir
		}
	}
	const how = "psql not found (PATH, the Postgres server binaries' directory); the quick start runs it: install postgresql-client"
	if os.Getenv("CI") != "" {
		t.Fatal(how)
	}
	t.Skip(how)
	return ""
}
