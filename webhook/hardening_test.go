package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// wantCheckViolation asserts err is Postgres's check_violation (SQLSTATE
// 23514) for the named constraint.
func wantCheckViolation(t *testing.T, err error, constraint string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != constraint {
		t.Fatalf("err = %v; want SQLSTATE 23514 from constraint %s", err, constraint)
	}
}

// TestEndpointURL_SQLCannotStoreCredentials locks the endpoint URL rules at the
// database: an endpoint URL with userinfo (sent as Authorization: Basic)
// or a fragment is refused by a CHECK constraint, whoever writes it.
func TestEndpointURL_SQLCannotStoreCredentials(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	for _, url := range []string{
		"https://user:pass@hooks.example.com/in",
		"http://token@hooks.example.com/in",
		"https://hooks.example.com/in#frag",
	} {
		_, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (url, secret) VALUES ($1, 'whsec_dGVzdA==')`, url)
		wantCheckViolation(t, err, "webhook_endpoints_url_rules")
	}
	// An @ in the path or query is not userinfo.
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (url, secret) VALUES ('https://hooks.example.com/in/a@b?to=x@y', 'whsec_dGVzdA==')`); err != nil {
		t.Fatalf("an @ after the authority was refused: %v", err)
	}
}

// The attempt path's own check: every rule of ValidateURL, on a URL read
// back from the row, with an error that never quotes the query string or
// the credentials.
func TestCheckEndpointURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url        string
		production bool
		want       string // "" = accepted
	}{
		{"https://hooks.example.com/in?token=abc", true, ""},
		{"http://hooks.example.com/in", false, ""},
		{"http://hooks.example.com/in", true, "must be https"},
		{"https://user:s3cr3t@hooks.example.com/in", false, "credentials"},
		{"https://hooks.example.com/in#x", false, "fragment"},
		{"ftp://hooks.example.com/in?token=s3cr3t", false, "absolute http(s)"},
		{"https://hooks.example.com:bad/in?token=s3cr3t", false, "does not parse"},
		{"https:///in?token=s3cr3t", false, "no host"},
	} {
		err := checkEndpointURL(tc.url, tc.production)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkEndpointURL(%s) = %v; want accepted", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidEndpoint)):
			t.Errorf("checkEndpointURL(%s) = %v; want ErrInvalidEndpoint mentioning %q", tc.url, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "s3cr3t"):
			t.Errorf("checkEndpointURL(%s) error %q carries the secret", tc.url, err)
		}
	}
}

// redactURL keeps what identifies a receiver and drops what could be a
// credential: userinfo, the query string, the fragment — also from a URL
// that does not parse.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://hooks.example.com/in", "https://hooks.example.com/in"},
		{"https://hooks.example.com/in?token=s3cr3t&x=1", "https://hooks.example.com/in?REDACTED"},
		{"https://u:s3cr3t@hooks.example.com/in", "https://REDACTED@hooks.example.com/in"},
		{"https://hooks.example.com:bad/in?token=s3cr3t", "https://hooks.example.com:bad/in?REDACTED"},
		{"https://u:s3cr3t@hooks.example.com:bad/in?token=s3cr3t#frag", "https://REDACTED@hooks.example.com:bad/in?REDACTED#REDACTED"},
		{"%zz?token=s3cr3t", "%zz?REDACTED"},
		{"https://hooks.example.com/in#s3cr3t", "https://hooks.example.com/in#REDACTED"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestHTTPClient_NeverSendsUserinfo: net/http turns a URL's userinfo into
// Authorization: Basic before the transport sees the request. The delivery
// client refuses such a request instead; a real server receives nothing.
func TestHTTPClient_NeverSendsUserinfo(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer srv.Close()

	client := newHTTPClient(Settings{AllowedCIDRs: loopback, Concurrency: 1}, 5*time.Second)
	target := strings.Replace(srv.URL, "http://", "http://user:s3cr3t@", 1) + "/in"
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, target, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	mu.Lock()
	got := len(auths)
	mu.Unlock()
	if got != 0 {
		t.Fatalf("the receiver got %d request(s), Authorization %q; want none", got, auths)
	}
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Do = %v; want a refusal that does not quote the password", err)
	}

	// Without userinfo the same client delivers.
	resp, err = client.Post(srv.URL+"/in", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("plain URL: %v", err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(auths) != 1 || auths[0] != "" {
		t.Fatalf("receiver saw %q; want one request without Authorization", auths)
	}
}

// TestWebhookOutbox_SQLMeetsEnqueueLimits locks the enqueue limits for
// webhooks: a plain-SQL INSERT is held to Enqueue's limits by CHECK
// constraints — the payload's size (DefaultMaxPayloadBytes of JSON text)
// and the event type's length and characters — and Enqueue names the same
// limit.
func TestWebhookOutbox_SQLMeetsEnqueueLimits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)

	big := `{"blob":"` + strings.Repeat("x", DefaultMaxPayloadBytes) + `"}`
	_, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', $1)`, big)
	wantCheckViolation(t, err, "webhook_outbox_payload_size")

	for _, et := range []string{"invoice\tpaid", "invoice paid", strings.Repeat("e", maxEventTypeLen+1), "a\x7fb"} {
		_, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ($1, '{}')`, et)
		wantCheckViolation(t, err, "webhook_outbox_event_type_format")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ($1, '{}')`, strings.Repeat("e", maxEventTypeLen)); err != nil {
		t.Fatalf("an event type of exactly %d bytes was refused: %v", maxEventTypeLen, err)
	}

	// The Go API refuses the same payload, naming the same limit.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // test cleanup
	_, err = Enqueue(ctx, tx, "invoice.paid", []byte(big))
	if !errors.Is(err, ErrPayloadTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(DefaultMaxPayloadBytes)) {
		t.Fatalf("Enqueue = %v; want ErrPayloadTooLarge naming %d", err, DefaultMaxPayloadBytes)
	}
	// A payload under Enqueue's byte count whose stored text is over it
	// (jsonb prints ", " between elements) is refused by the constraint,
	// reported as the same limit.
	var b strings.Builder
	b.WriteString("[")
	for b.Len() < DefaultMaxPayloadBytes-4 {
		b.WriteString("1,")
	}
	b.WriteString("1]")
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx) //nolint:errcheck // test cleanup
	_, err = Enqueue(ctx, tx2, "invoice.paid", []byte(b.String()))
	if !errors.Is(err, ErrPayloadTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(DefaultMaxPayloadBytes)) {
		t.Fatalf("Enqueue of %d bytes stored as more = %v; want ErrPayloadTooLarge naming %d", b.Len(), err, DefaultMaxPayloadBytes)
	}
}

// http.Client quotes the whole URL in every transport error; the redacted
// form keeps the cause and drops the query string.
func TestRedactedURLError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/in?token=s3cr3t"
	srv.Close() // nothing listens any more: the dial fails
	client := newHTTPClient(Settings{AllowedCIDRs: loopback, Concurrency: 1}, 5*time.Second)
	_, err := client.Post(url, "application/json", strings.NewReader("{}"))
	if err == nil || !strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Post = %v; want the transport error, which quotes the URL", err)
	}
	red := redactedURLError(err)
	if strings.Contains(red.Error(), "s3cr3t") || !strings.Contains(red.Error(), "?REDACTED") || !strings.Contains(red.Error(), "connect") {
		t.Fatalf("redactedURLError = %q; want the cause without the token", red)
	}
}

// The migration's literals are the Go constants: one rule, two places.
func TestWebhookConstraints_MatchGoLimits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	for name, want := range map[string]string{
		"webhook_outbox_payload_size":      fmt.Sprintf("<= %d", DefaultMaxPayloadBytes),
		"webhook_outbox_event_type_format": fmt.Sprintf("<= %d", maxEventTypeLen),
	} {
		var def string
		if err := pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1`, name).Scan(&def); err != nil {
			t.Fatalf("constraint %s: %v", name, err)
		}
		if !strings.Contains(def, want) {
			t.Errorf("constraint %s is %s; want it to contain %q", name, def, want)
		}
	}
}
