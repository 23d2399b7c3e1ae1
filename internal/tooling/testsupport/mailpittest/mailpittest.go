// Package mailpittest runs Mailpit, a real SMTP server written by someone
// else, for tests: it catches what an in-process go-smtp sink, written
// against the same assumptions as the client, could not. CI (CI non-empty)
// fails without the binary; locally the tests skip with install
// instructions.
package mailpittest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
)

// Binary finds Mailpit: MAILPIT_BIN, PATH, then $(go env GOPATH)/bin.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MAILPIT_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("mailpit"); err == nil {
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "mailpit")
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				return p
			}
		}
	}
	const how = "mailpit not found (MAILPIT_BIN, PATH, $(go env GOPATH)/bin); install it with: go install github.com/axllent/mailpit@v1.33.1"
	if os.Getenv("CI") != "" {
		t.Fatal(how)
	}
	t.Skip(how)
	return ""
}

// Server is one running Mailpit.
type Server struct {
	SMTPPort int    // its SMTP listener on 127.0.0.1
	API      string // its HTTP API's base URL
}

// Start runs Mailpit on free loopback ports until the test ends, with extra
// command-line arguments. Ports are picked by binding and releasing, so
// another process can race us to one; a start that does not become ready is
// retried on new ports.
func Start(t testing.TB, bin string, extra ...string) *Server {
	t.Helper()
	var lastOut string
	for range 3 {
		smtpPort, httpPort := freePort(t), freePort(t)
		args := append([]string{
			"-s", "127.0.0.1:" + strconv.Itoa(smtpPort),
			"-l", "127.0.0.1:" + strconv.Itoa(httpPort),
			"--database", filepath.Join(t.TempDir(), "mailpit.db"),
			"--disable-version-check", "--smtp-disable-rdns", "--quiet",
		}, extra...)
		cmd := exec.Command(bin, args...)
		out := &logbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start mailpit: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited // reaped: no process outlives the test
		}
		s := &Server{SMTPPort: smtpPort, API: "http://127.0.0.1:" + strconv.Itoa(httpPort)}
		if s.ready(exited) {
			t.Cleanup(stop)
			return s
		}
		stop()
		lastOut = out.String()
	}
	t.Fatalf("mailpit did not become ready; last output:\n%s", lastOut)
	return nil
}

func (s *Server) ready(exited <-chan struct{}) bool {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := client.Get(s.API + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// apiClient reads Mailpit's API: not http.DefaultClient, whose idle
// connections every httptest server's Close drops, a request's among them.
var apiClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

// Get returns the body of a GET of the API path, failing the test on
// anything but 200.
func (s *Server) Get(t testing.TB, path string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.API+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := apiClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", path, resp.StatusCode, err, body)
	}
	return body
}

// GetJSON decodes a GET of the API path into into.
func (s *Server) GetJSON(t testing.TB, path string, into any) {
	t.Helper()
	if err := json.Unmarshal(s.Get(t, path), into); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// WaitForMessages polls the message list until it holds n messages and
// decodes it into list. Mailpit answers 250 before its store is
// necessarily visible to the API. The deadline is generous: it bounds a
// broken run, it does not measure speed.
func (s *Server) WaitForMessages(t testing.TB, n int, list any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var probe struct{ Total int }
		body := s.Get(t, "/api/v1/messages")
		if err := json.Unmarshal(body, &probe); err != nil {
			t.Fatal(err)
		}
		if probe.Total >= n {
			if err := json.Unmarshal(body, list); err != nil {
				t.Fatal(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Mailpit holds %d messages; want %d", probe.Total, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	port, err := pgserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
