package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// receiptsDir is the template directory outbox/templatedir tests with.
var receiptsDir = filepath.Join("..", "..", "outbox", "templatedir", "testdata", "receipts")

// brokenDir copies receiptsDir's receipt kind with a text.tmpl that does
// not parse on line 3.
func brokenDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"subject.tmpl", "html.tmpl", "sample.json"} {
		b, err := os.ReadFile(filepath.Join(receiptsDir, "receipt", name))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte(`{{- template "_shared/layout.html.tmpl" .}}`), nil)
		writeFile(t, filepath.Join(dir, "receipt", name), string(b))
	}
	writeFile(t, filepath.Join(dir, "receipt", "text.tmpl"), "Hello {{.name}},\n\n{{.order_id}\n")
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func cliWithTemplates(dir string) func(args ...string) (int, string, string) {
	lookup := func(k string) (string, bool) {
		switch k {
		case "EMAIL_TEMPLATES_DIR":
			return dir, dir != ""
		case "SMTP_FROM":
			return "Shop <shop@example.com>", true
		}
		return "", false
	}
	return func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runMain(args, lookup, &out, &errOut)
		return code, out.String(), errOut.String()
	}
}

func TestTemplatesCommands(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	broken := brokenDir(t)
	for _, tc := range []struct {
		name     string
		dir      string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		files    map[string]string // written file → a substring
		noStdout bool
	}{
		{name: "list", dir: receiptsDir, args: []string{"templates", "list"},
			stdout: []string{"receipt", "directory", "receipt/html.tmpl", "invoice", "built-in"}},
		{name: "check", dir: receiptsDir, args: []string{"templates", "check"}, stdout: []string{"1 kinds, each renders its sample.json"}},
		{name: "check broken", dir: broken, args: []string{"templates", "check"}, code: 2, stderr: []string{"receipt/text.tmpl:3:"}},
		{name: "check --dir", args: []string{"templates", "check", "--dir", broken}, code: 2, stderr: []string{"receipt/text.tmpl:3:"}},
		{name: "no directory", args: []string{"templates", "check"}, code: 2, stderr: []string{"EMAIL_TEMPLATES_DIR"}},
		{name: "render the sample", dir: receiptsDir, args: []string{"templates", "render", "receipt"},
			stdout: []string{"Subject: Receipt for order ord_1001", "multipart/alternative", "text/html", "From: \"Shop\" <shop@example.com>"}},
		{name: "render --data --out --html", dir: receiptsDir,
			args: []string{"templates", "render", "receipt", "--data", writeTemp(t, out, "p.json",
				`{"to": "grace@example.com", "name": "Grace", "order_id": "ord_9", "total": "€1", "items": ["Sencha"]}`),
				"--out", filepath.Join(out, "r.eml"), "--html", filepath.Join(out, "r.html")},
			stdout: []string{"wrote"},
			files:  map[string]string{"r.eml": "Subject: Receipt for order ord_9", "r.html": "<li>Sencha</li>"}},
		{name: "render a built-in", dir: receiptsDir, args: []string{"templates", "render", "raw", "--data",
			writeTemp(t, out, "raw.json", `{"to": "a@example.com", "subject": "Hi", "text": "Hello"}`)}, stdout: []string{"Subject: Hi"}},
		{name: "render an unknown kind", dir: receiptsDir, args: []string{"templates", "render", "newsletter", "--data",
			writeTemp(t, out, "n.json", `{"to": "a@example.com"}`)}, code: 1, stderr: []string{`kind "newsletter"`}},
		{name: "render a payload Enqueue refuses", dir: receiptsDir, args: []string{"templates", "render", "receipt", "--data",
			writeTemp(t, out, "bad.json", `{"name": "x"}`)}, code: 1, stderr: []string{"bad.json", "payload.to is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := cliWithTemplates(tc.dir)(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for name, w := range tc.files {
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil || !strings.Contains(string(b), w) {
					t.Errorf("%s: %v; want it to contain %q:\n%s", name, err, w, b)
				}
			}
		})
	}
}

func writeTemp(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	writeFile(t, p, content)
	return p
}

// A broken template refuses the boot: `worker run` exits naming the
// variable, the file and the line, before it claims anything.
func TestRunRefusesBrokenTemplates(t *testing.T) {
	t.Parallel()
	env := []string{"DATABASE_URL=" + pgtest.URL(t), "HTTP_ADDR=" + freeAddr(t), "EMAIL_TEMPLATES_DIR=" + brokenDir(t)}
	cmd, out := startWorker(t, env, "run")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// It must exit; one that says it is running booted with the broken
	// template (the cleanup kills it), and says so at once rather than
	// after the wait.
	// Failing, it kills the worker and waits for the Wait above to return
	// first: startBinary's cleanup would otherwise Wait a second time
	// beside it, and one of the two never returns.
	fail := func(format string, args ...any) {
		t.Helper()
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf(format, args...)
	}
	deadline := time.After(2 * time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("worker run exited 0 with a broken template")
			}
			break wait
		case <-tick.C:
			if strings.Contains(out.String(), "postbox worker running") {
				fail("worker run booted with a broken template:\n%s", out)
			}
		case <-deadline:
			fail("worker run is still running with a broken template:\n%s", out)
		}
	}
	if s := out.String(); !strings.Contains(s, "EMAIL_TEMPLATES_DIR") || !strings.Contains(s, "receipt/text.tmpl:3:") {
		t.Fatalf("worker run's refusal does not name the variable and receipt/text.tmpl:3:\n%s", s)
	}
}
