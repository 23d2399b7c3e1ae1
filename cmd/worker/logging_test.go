package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func TestLoggerRendersDurationsAsStrings(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := newLogger(&buf, slog.LevelInfo).With("lease", 6*time.Minute)
	log.Info("x", "timeout", 30*time.Second, slog.Duration("d", 1500*time.Millisecond),
		slog.Group("g", "wait", 5*time.Millisecond), "n", 7)
	got := logLines(t, &buf)[0]
	for k, want := range map[string]any{"lease": "6m0s", "timeout": "30s", "d": "1.5s", "n": float64(7)} {
		if got[k] != want {
			t.Errorf("%s = %#v, want %#v", k, got[k], want)
		}
	}
	if g, _ := got["g"].(map[string]any); g["wait"] != "5ms" {
		t.Errorf("grouped duration = %#v, want \"5ms\"", got["g"])
	}
}

func TestRiverLoggerDemotesChatter(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		log := riverLogger(newLogger(&buf, level).With("component", "river"))
		log.Info("producer: Producer job counts", "queue", "q", "num_jobs_running", 1)
		log.Info("JobCleaner: Ran successfully", "num_jobs_deleted", 3)
		log.Info("River client started", "client_id", "c1")
		log.Warn("producer: Producer job counts") // only INFO is demoted
		lines := logLines(t, &buf)
		var got []string
		for _, l := range lines {
			got = append(got, l["level"].(string)+" "+l["msg"].(string))
			if l["component"] != "river" {
				t.Errorf("lost the logger's attributes: %v", l)
			}
		}
		want := []string{"INFO River client started", "WARN producer: Producer job counts"}
		if level == slog.LevelDebug {
			want = []string{"DEBUG producer: Producer job counts", "DEBUG JobCleaner: Ran successfully",
				"INFO River client started", "WARN producer: Producer job counts"}
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("LOG_LEVEL=%s: lines %q, want %q", level, got, want)
		}
		if level == slog.LevelDebug && lines[0]["queue"] != "q" {
			t.Errorf("demoted line lost its attributes: %v", lines[0])
		}
	}
}

// River UI's refresh of its cached counts that a shutdown cancels is not
// an error (a replica stopping logged one, and the pooler test, which
// fails on any ERROR, failed): it is logged at DEBUG; one that fails
// otherwise stays an ERROR.
func TestRiverUILoggerDemotesCanceledRefreshes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := riverUILogger(newLogger(&buf, slog.LevelInfo).With("component", "riverui"))
	const msg = "querycacher.QueryCacher[riverui.stateCountSnapshot]: Error running query"
	log.Error(msg, "err", errors.New("error committing transaction: timeout: context already done: context canceled"))
	log.Error(msg, "err", errors.New("failed to connect: connection refused"))
	lines := logLines(t, &buf)
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || !strings.Contains(lines[0]["err"].(string), "connection refused") {
		t.Fatalf("lines %v, want the refused connection's ERROR alone", lines)
	}
}

// The commands a person runs log sentences, not JSON: the level as a word
// (none for INFO), the message, the attributes in parentheses; below the
// level nothing.
func TestCLILoggerWritesSentences(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := newCLILogger(&buf, slog.LevelInfo).With("email", "ada@example.com")
	log.Info("suppression lifted", "by", "ops", "after", 90*time.Second)
	log.Warn("orphan", slog.Group("g", "n", 2))
	log.Error("failed")
	log.Debug("not shown")
	want := "suppression lifted (email=ada@example.com, by=ops, after=1m30s)\n" +
		"warning: orphan (email=ada@example.com, g=[n=2])\n" +
		"error: failed (email=ada@example.com)\n"
	if buf.String() != want {
		t.Fatalf("CLI log:\n%s\nwant:\n%s", buf.String(), want)
	}
}
