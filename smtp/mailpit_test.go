package smtp

import (
	"context"
	"encoding/json"
	"errors"

	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Mailpit is a real SMTP server written by someone else: it catches what an
// in-process go-smtp sink, written against the same assumptions as the
// client, could not. CI runs these tests (CI non-empty makes a missing
// binary fatal); locally they skip with install instructions.
func TestMailpit(t *testing.T) {
	t.Parallel()
	bin := mailpitBinary(t)
	_, files := newBundle(t)

	t.Run("require STARTTLS: delivered with PDF", func(t *testing.T) {
		t.Parallel()
		mp := startMailpit(t, bin, "--smtp-require-starttls", "--smtp-tls-cert", files.Cert, "--smtp-tls-key", files.Key,
			"--smtp-auth-accept-any")
		cfg := Config{Host: "localhost", Port: mp.smtpPort, Mode: ModeSTARTTLS, CAFile: files.CA,
			Username: "postbox", Password: "pw", From: "Billing <billing@example.com>"}
		m := newMailer(t, cfg, nil)

		msg := testMessage("5f0c2a9e-8d7b-4e61-a3c4-1b2d3e4f5a6b")
		msg.PDF, msg.PDFName = []byte("%PDF-1.4\n% postbox test\n%%EOF\n"), "INV-42.pdf"
		if err := m.Send(testCtx(t), msg); err != nil {
			t.Fatal(err)
		}

		var list struct {
			Total    int
			Messages []struct {
				ID, MessageID, Subject, Username string
				Attachments                      int
			}
		}
		mp.waitForMessages(t, 1, &list)
		got := list.Messages[0]
		if got.MessageID != msg.RowID+"@example.com" || got.Subject != msg.Subject || got.Attachments != 1 {
			t.Fatalf("Mailpit has %+v; want Message-ID %s@example.com, subject %q, one attachment", got, msg.RowID, msg.Subject)
		}
		if got.Username != "postbox" {
			t.Errorf("Mailpit saw AUTH user %q; want postbox", got.Username)
		}

		var full struct {
			MessageID   string
			Text        string
			HTML        string
			Attachments []struct{ PartID, FileName, ContentType string }
		}
		mp.getJSON(t, "/api/v1/message/"+got.ID, &full)
		if len(full.Attachments) != 1 {
			t.Fatalf("attachments %+v", full.Attachments)
		}
		a := full.Attachments[0]
		if a.ContentType != "application/pdf" || a.FileName != msg.PDFName {
			t.Fatalf("attachment %+v; want application/pdf named %s", a, msg.PDFName)
		}
		if !strings.Contains(full.Text, "your invoice is attached") || !strings.Contains(full.HTML, "<p>Hello Ada,</p>") {
			t.Errorf("text %q / html %q", full.Text, full.HTML)
		}
		if body := mp.get(t, "/api/v1/message/"+got.ID+"/part/"+a.PartID); string(body) != string(msg.PDF) {
			t.Errorf("attachment bytes %q; want %q", body, msg.PDF)
		}
	})

	t.Run("no TLS offered: starttls refuses", func(t *testing.T) {
		t.Parallel()
		mp := startMailpit(t, bin)
		m := newMailer(t, Config{Host: "127.0.0.1", Port: mp.smtpPort, Mode: ModeSTARTTLS, CAFile: files.CA}, nil)
		err := m.Send(testCtx(t), testMessage("row-1"))
		if !errors.Is(err, ErrSTARTTLSRefused) {
			t.Fatalf("err = %v; want ErrSTARTTLSRefused", err)
		}
		var list struct{ Total int }
		mp.getJSON(t, "/api/v1/messages", &list)
		if list.Total != 0 {
			t.Fatalf("Mailpit stored %d messages; want none", list.Total)
		}
	})
}

func mailpitBinary(t *testing.T) string {
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

type mailpit struct {
	smtpPort int
	api      string
}

// startMailpit runs Mailpit on free loopback ports until the test ends.
// Ports are picked by binding and releasing, so another process can race
// us to one; a start that does not become ready is retried on new ports.
func startMailpit(t *testing.T, bin string, extra ...string) *mailpit {
	t.Helper()
	var lastOut string
	for attempt := 0; attempt < 3; attempt++ {
		smtpPort, httpPort := freePort(t), freePort(t)
		args := append([]string{
			"-s", "127.0.0.1:" + strconv.Itoa(smtpPort),
			"-l", "127.0.0.1:" + strconv.Itoa(httpPort),
			"--database", filepath.Join(t.TempDir(), "mailpit.db"),
			"--disable-version-check", "--smtp-disable-rdns", "--quiet",
		}, extra...)
		cmd := exec.Command(bin, args...)
		out := &logBuf{}
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

		mp := &mailpit{smtpPort: smtpPort, api: "http://127.0.0.1:" + strconv.Itoa(httpPort)}
		if mp.ready(exited) {
			t.Cleanup(stop)
			return mp
		}
		stop()
		lastOut = out.String()
	}
	t.Fatalf("mailpit did not become ready; last output:\n%s", lastOut)
	return nil
}

func (mp *mailpit) ready(exited <-chan struct{}) bool {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := client.Get(mp.api + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (mp *mailpit) get(t *testing.T, path string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mp.api+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
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

func (mp *mailpit) getJSON(t *testing.T, path string, into any) {
	t.Helper()
	if err := json.Unmarshal(mp.get(t, path), into); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// waitForMessages polls the message list until it holds n messages. Mailpit
// answers 250 before its store is necessarily visible to the API.
func (mp *mailpit) waitForMessages(t *testing.T, n int, list any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var probe struct{ Total int }
		body := mp.get(t, "/api/v1/messages")
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

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
