package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/migrations"
)

// startWorker runs the worker binary with extra environment and returns the
// command and its combined stderr.
func startWorker(t *testing.T, env []string, args ...string) (*exec.Cmd, *logbuf.Buffer) {
	t.Helper()
	return startBinary(t, workerBinary(t), env, args...)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// testHTTP is the tests' client of a replica's server: not
// http.DefaultClient, whose idle connections every httptest server's Close
// drops, a parallel test's request among them.
var testHTTP = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

func get(t *testing.T, url string, auth ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	resp, err := testHTTP.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func waitReady(t *testing.T, base string, stderr fmt.Stringer) {
	t.Helper()
	eventually.Explain(t, "the worker ready", 2*time.Minute, func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	}, func() string { return "output:\n" + stderr.String() })
}

// TestRunBootsServesAndStopsOnSIGTERM is the foundation's acceptance as a
// user sees it: readiness, River UI behind auth, metrics with River and Go
// figures, and a clean exit on SIGTERM.
func TestRunBootsServesAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	base := "http://" + addr
	dbURL := pgtest.URL(t)
	portalKey := filepath.Join(t.TempDir(), "portal-key")
	const portalSecret = "portal-key-0123456789-0123456789-0123456789"
	if err := os.WriteFile(portalKey, []byte(portalSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var keyOut bytes.Buffer
	if code := runMain([]string{"api-key", "new", "ci"}, func(string) (string, bool) { return "", false }, &keyOut, io.Discard); code != 0 {
		t.Fatalf("worker api-key new: exit %d", code)
	}
	apiKey := regexp.MustCompile(`key +(\S+)`).FindStringSubmatch(keyOut.String())[1]
	apiEntry := regexp.MustCompile(`API_KEYS +(\S+)`).FindStringSubmatch(keyOut.String())[1]
	cmd, stderr := startWorker(t, []string{
		"DATABASE_URL=" + dbURL, "HTTP_ADDR=" + addr, "SMTP_TLS=none", "SMTP_PORT=2525",
		"RIVERUI_USERNAME=admin", "RIVERUI_PASSWORD=s3cret", "SHUTDOWN_TIMEOUT=10s",
		"POSTMARK_WEBHOOK_USERNAME=postmark", "POSTMARK_WEBHOOK_PASSWORD=pm-s3cret",
		"EMAIL_CONCURRENCY=7", "EMAIL_CONCURENCY=4", "SMPT_HOST=y", "EMAIL_RATE_LIMIT=50",
		"PORTAL_SIGNING_KEY_FILE=" + portalKey, "API_KEYS=" + apiEntry,
	}, "run")
	waitReady(t, base, stderr)

	// The tenant portal is on: a link `worker portal link` mints with the
	// same key opens it, once.
	var linkOut, linkErr bytes.Buffer
	cli := map[string]string{"DATABASE_URL": dbURL, "PORTAL_SIGNING_KEY": portalSecret, "LOG_LEVEL": "error"}
	if code := runMain([]string{"portal", "link", "acme", "--base", base}, func(k string) (string, bool) { v, ok := cli[k]; return v, ok },
		&linkOut, &linkErr); code != 0 || !strings.HasPrefix(linkOut.String(), base+"/portal/open?token=") {
		t.Fatalf("worker portal link: exit %d, %q %q", code, linkOut.String(), linkErr.String())
	}
	portalLink := strings.TrimSpace(linkOut.String())
	parsed, _ := url.Parse(portalLink)
	linkToken := parsed.Query().Get("token")
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i, want := range []int{http.StatusSeeOther, http.StatusForbidden} {
		resp, err := noRedirect.Get(portalLink)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("opening the portal link, try %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if code, _ := get(t, base+"/portal/"); code != http.StatusUnauthorized {
		t.Errorf("/portal/ without a session = %d, want 401", code)
	}

	// The HTTP API is on: the key `worker api-key new` printed enqueues an
	// event, which the replica delivers nowhere (no endpoint) but commits.
	apiReq, _ := http.NewRequest(http.MethodPost, base+"/api/v1/events", strings.NewReader(`{"type":"invoice.paid","payload":{"id":"in_1"}}`))
	apiReq.Header.Set("Authorization", "Bearer "+apiKey)
	apiReq.Header.Set("Content-Type", "application/json")
	apiResp, err := testHTTP.Do(apiReq)
	if err != nil {
		t.Fatal(err)
	}
	apiBody, _ := io.ReadAll(apiResp.Body)
	apiResp.Body.Close()
	if apiResp.StatusCode != http.StatusAccepted || !strings.Contains(string(apiBody), `"id"`) {
		t.Errorf("POST /api/v1/events with the new key: %d %s", apiResp.StatusCode, apiBody)
	}

	// The delivery-event endpoints are mounted: Postmark's asks for its
	// credentials, an unconfigured one is absent.
	for _, tc := range []struct {
		path string
		want int
	}{{"/events/postmark", http.StatusUnauthorized}, {"/events/ses", http.StatusNotFound}} {
		resp, err := testHTTP.Post(base+tc.path, "application/json", strings.NewReader(`{"RecordType":"Bounce"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST %s = %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}

	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := get(t, base+"/riverui/"); code != http.StatusUnauthorized {
		t.Errorf("/riverui/ without credentials = %d, want 401", code)
	}
	if code, body := get(t, base+"/riverui/", "admin", "s3cret"); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Errorf("/riverui/ with credentials = %d, body %.80q", code, body)
	}
	if code, _ := get(t, base+"/riverui/api/health-checks/complete", "admin", "s3cret"); code != http.StatusOK {
		t.Errorf("River UI health check = %d", code)
	}
	code, metrics := get(t, base+"/metrics")
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total", "postbox_river_jobs{", "postbox_build_info{"} {
		if code != http.StatusOK || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	for _, want := range []string{`postbox_email_event_requests_total{code="401",provider="postmark"} 1`,
		`postbox_email_suppressions_added_total{source="complaint"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks the delivery-event series %s", want)
		}
	}

	stopWorker(t, cmd, stderr)
	if strings.Contains(stderr.String(), portalSecret) || strings.Contains(stderr.String(), linkToken) || strings.Contains(stderr.String(), apiKey) {
		t.Errorf("the log shows the portal key or a link's token:\n%s", stderr)
	}
	if !strings.Contains(stderr.String(), "postbox worker stopped") {
		t.Errorf("no clean-stop log line; output:\n%s", stderr)
	}
	// Typos are named at boot, with what they most likely meant, and the
	// effective concurrency and send rate are logged.
	for _, want := range []string{"ignoring EMAIL_CONCURENCY: postbox reads no such variable; did you mean EMAIL_CONCURRENCY?",
		"ignoring SMPT_HOST: postbox reads no such variable; did you mean SMTP_HOST?", `"email_concurrency":7`,
		`"EMAIL_RATE_LIMIT":"50 msg/s across the pool, bursts of at most 2.5"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("boot log lacks %q:\n%s", want, stderr)
		}
	}
}

// TestBadInputFailsWithOneLine: each bad configuration exits non-zero with
// one line that names what is wrong.
func TestBadInputFailsWithOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"unreachable database", []string{"DATABASE_URL=postgres://postgres@127.0.0.1:1/postbox?connect_timeout=3"}, "127.0.0.1"},
		{"bogus SMTP_TLS", []string{"SMTP_TLS=bogus"}, "SMTP_TLS"},
		{"lease chain broken", []string{"EMAIL_BATCH_SIZE=6"}, "BatchSize×PerRowBudget ≤ BatchTimeout"},
		{"Postmark user without password", []string{"POSTMARK_WEBHOOK_USERNAME=postmark"}, "POSTMARK_WEBHOOK_PASSWORD must be set together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := append([]string{"HTTP_ADDR=" + freeAddr(t)}, tc.env...)
			cmd, out := startWorker(t, env, "run")
			err := cmd.Wait()
			if err == nil {
				t.Fatal("worker run succeeded with bad input")
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("output = %q, want one line naming %q", out, tc.want)
			}
		})
	}
}

// TestRunRefusesWhileMigrationsBehind: a worker never runs against a schema
// it does not understand, and says which command fixes it.
func TestRunRefusesWhileMigrationsBehind(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	env := []string{"DATABASE_URL=" + url, "HTTP_ADDR=" + freeAddr(t)}
	down, out := startWorker(t, env, "migrate", "down", "--all")
	if err := down.Wait(); err != nil {
		t.Fatalf("migrate down --all: %v\n%s", err, out)
	}
	cmd, out := startWorker(t, env, "run")
	if err := cmd.Wait(); err == nil {
		t.Fatal("worker run started with migrations behind")
	}
	if !strings.Contains(out.String(), "worker migrate up") {
		t.Fatalf("refusal does not name the command to run: %s", out)
	}
	status, out := startWorker(t, env, "migrate", "status")
	if err := status.Wait(); status.ProcessState.ExitCode() != 1 || !strings.Contains(out.String(), "postbox schema  0 of") {
		t.Fatalf("migrate status while behind: %v, want exit 1\n%s", err, out)
	}
	up, out := startWorker(t, env, "migrate", "up")
	if err := up.Wait(); err != nil || !strings.Contains(out.String(), fmt.Sprintf("River schema    %d of %d", migrations.RiverTarget(), migrations.RiverTarget())) {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	status, out = startWorker(t, env, "migrate", "status")
	if err := status.Wait(); err != nil || !strings.Contains(out.String(), "current") {
		t.Fatalf("migrate status when current: %v, want exit 0\n%s", err, out)
	}
}
