package webhook

import (
	"bufio"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/pgtext"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestDelivery_HugeRedirectErrorTextCapped locks the error-text cap: a
// receiver answering 302 with a 5 MB Location header must not write 5 MB
// into last_error, into every attempt row, into the log lines or into the
// Tally (a River job's recorded output). Every place the receiver's text
// reaches holds at most pgtext.MaxLastError bytes plus the "…" mark.
func TestDelivery_HugeRedirectErrorTextCapped(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newDispatcher(t, pool, func(o *Config) {
		o.Logger = logger
		o.Backoff = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}
	})

	location := "https://elsewhere.example/" + strings.Repeat("x", 5<<20)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", location)
		w.WriteHeader(http.StatusFound)
	}))
	srv.Config.MaxHeaderBytes = 16 << 20
	srv.Start()
	t.Cleanup(srv.Close)
	ep := createEndpoint(t, pool, srv.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	const limit = pgtext.MaxLastError + len("…")
	var tallies []Tally
	sum, err := p.Drain(ctx, testWindow)
	if err != nil || sum.Retried != 1 {
		t.Fatalf("Drain = %+v, %v; want the 302 retried", sum, err)
	}
	tallies = append(tallies, sum)
	eventually.Until(t, "the delivery final, on a 10 ms schedule", time.Minute, func() bool {
		if oneDelivery(t, pool, `endpoint_id = $1`, ep.ID).Status != "pending" {
			return true
		}
		sum, err := p.DrainRetries(ctx, testWindow)
		if err != nil {
			t.Fatal(err)
		}
		tallies = append(tallies, sum)
		return false
	})

	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	if d.Status != "failed" || d.Attempts != 3 {
		t.Fatalf("delivery %s after %d attempts, want failed after 3", d.Status, d.Attempts)
	}
	if n := len(str(d.LastError)); n > limit || !strings.Contains(str(d.LastError), "302 redirect not followed") {
		t.Errorf("last_error is %d bytes (%.60q…), want at most %d naming the redirect", n, str(d.LastError), limit)
	}
	rows, err := pool.Query(ctx, `SELECT attempt, octet_length(error) FROM webhook_delivery_attempts WHERE delivery_id = $1 ORDER BY attempt`, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for rows.Next() {
		var attempt, n int
		if err := rows.Scan(&attempt, &n); err != nil {
			t.Fatal(err)
		}
		attempts++
		if n > limit {
			t.Errorf("attempt %d's error is %d bytes, want at most %d", attempt, n, limit)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 {
		t.Errorf("%d attempt rows, want 3", attempts)
	}

	errorsSeen := 0
	for i, tally := range tallies {
		for _, e := range tally.Errors {
			errorsSeen++
			if len(e) > limit {
				t.Errorf("tally %d keeps an error of %d bytes, want at most %d", i, len(e), limit)
			}
		}
	}
	if errorsSeen == 0 {
		t.Error("no tally kept the redirect error: nothing was checked")
	}

	lines, attemptLines := 0, 0
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		lines++
		line := sc.Text()
		if strings.Contains(line, "redirect not followed") {
			attemptLines++
		}
		if len(line) > 10<<10 {
			t.Errorf("log line of %d bytes (%.120s…), want at most 10 KB", len(line), line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if attemptLines != 3 {
		t.Errorf("%d of %d log lines name the redirect, want one per attempt (3)", attemptLines, lines)
	}
}
