package smtp

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/testcert"
)

// testTimeout bounds every test's network work: nothing may hang forever.
const testTimeout = 15 * time.Second

// logBuf collects log output from concurrent goroutines.
type logBuf struct{ logbuf.Buffer }

// lines returns the log lines at level that contain every one of words.
func (b *logBuf) lines(level slog.Level, words ...string) []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if !strings.Contains(l, "level="+level.String()) {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

func newLogger() (*slog.Logger, *logBuf) {
	b := &logBuf{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

func startSink(t *testing.T, opts smtpsink.Options) *smtpsink.Sink {
	t.Helper()
	s, err := smtpsink.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newBundle(t *testing.T) (*testcert.Bundle, testcert.Files) {
	t.Helper()
	b, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	f, err := b.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b, f
}

// sinkConfig points a Config at s in the given mode.
func sinkConfig(s *smtpsink.Sink, mode Mode) Config {
	return Config{Host: s.Host(), Port: s.Port(), Mode: mode, From: "Billing <billing@example.com>", AppEnv: "test"}
}

func newMailer(t *testing.T, cfg Config, logger *slog.Logger) *Mailer {
	t.Helper()
	m, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func testMessage(rowID string) Message {
	return Message{
		RowID:   rowID,
		To:      "Ada <ada@example.org>",
		Subject: "Invoice " + rowID,
		Text:    "Hello Ada,\n\nyour invoice is attached.\n",
		HTML:    "<p>Hello Ada,</p><p>your invoice is attached.</p>",
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// assertTransient fails unless err is a failure the outbox may retry.
func assertTransient(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Send succeeded; want a failure")
	}
	if errors.Is(err, ErrPermanent) {
		t.Fatalf("err is permanent, want transient: %v", err)
	}
}

// silentServer accepts TCP connections and never says a word: a relay that
// hangs before its greeting.
func silentServer(t *testing.T) (host string, port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	a := ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

// returnsWithin runs send and fails the test if it has not returned after
// limit. On failure the test's cleanups (closing servers) unblock send.
func returnsWithin(t *testing.T, limit time.Duration, send func() error) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- send() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit):
		t.Fatalf("Send did not return within %s", limit)
		return 0, nil
	}
}

func encodeStd(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
