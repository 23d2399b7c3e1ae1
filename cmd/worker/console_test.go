package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/operator/console"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The console sits behind River UI's auth: refused in production without
// credentials, 401 without the right ones, and an unauthenticated POST
// changes nothing.
func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, status, attempts, last_error)
		VALUES ('cus_1', '{"to":"a@example.com","subject":"s","text":"t"}', 'failed', 3, 'boom') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	con, err := console.New(console.Config{DB: pool})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		cfg        Config
		user, pass string
		code       int
		want       string
	}{
		{"production without credentials", Config{AppEnv: "production"}, "", "", 403, "the console is disabled: set RIVERUI_USERNAME and RIVERUI_PASSWORD"},
		{"production without credentials, even with basic auth", Config{AppEnv: "production"}, "admin", "x", 403, "the console is disabled"},
		{"credentials configured, none sent", Config{AppEnv: "production", RiverUIUser: "admin", RiverUIPassword: "pw"}, "", "", 401, "unauthorized"},
		{"credentials configured, wrong password", Config{AppEnv: "production", RiverUIUser: "admin", RiverUIPassword: "pw"}, "admin", "nope", 401, "unauthorized"},
		{"credentials configured, wrong user", Config{AppEnv: "development", RiverUIUser: "admin", RiverUIPassword: "pw"}, "eve", "pw", 401, "unauthorized"},
		{"the right credentials", Config{AppEnv: "production", RiverUIUser: "admin", RiverUIPassword: "pw"}, "admin", "pw", 200, "Outboxes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			srv := httptest.NewServer(operatorAuth(tc.cfg, slog.New(slog.NewTextHandler(&logs, nil)), "the console", con))
			defer srv.Close()
			get := func(method, path string, body io.Reader) (int, string) {
				req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, body)
				if body != nil {
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				if tc.user != "" {
					req.SetBasicAuth(tc.user, tc.pass)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			code, body := get(http.MethodGet, "/console/", nil)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("GET /console/: %d %q, want %d with %q", code, body, tc.code, tc.want)
			}
			if tc.code == 401 && !strings.Contains(body, "unauthorized") {
				t.Fatal("no 401 body")
			}
			if tc.code != 200 {
				form := url.Values{"id": {id}, "confirm": {"yes"}, "csrf": {"x"}}
				if code, _ := get(http.MethodPost, "/console/do/requeue-email", strings.NewReader(form.Encode())); code != tc.code {
					t.Fatalf("POST without auth: %d, want %d", code, tc.code)
				}
				var status string
				if err := pool.QueryRow(ctx, `SELECT status FROM email_outbox WHERE id = $1`, id).Scan(&status); err != nil || status != "failed" {
					t.Fatalf("after the refused POST the row is %q (%v)", status, err)
				}
			}
			if tc.cfg.RiverUIUser == "" && !strings.Contains(logs.String(), "the console disabled") {
				t.Errorf("the refusal is not logged at boot:\n%s", logs.String())
			}
		})
	}
}

// Replicas with the same credentials derive the same CSRF key, so a form
// from one is accepted by another; other credentials, another key.
func TestConsoleCSRFKeyIsSharedByReplicas(t *testing.T) {
	t.Parallel()
	a := consoleCSRFKey(Config{RiverUIUser: "admin", RiverUIPassword: "pw"})
	b := consoleCSRFKey(Config{RiverUIUser: "admin", RiverUIPassword: "pw"})
	c := consoleCSRFKey(Config{RiverUIUser: "admin", RiverUIPassword: "pw2"})
	if len(a) != 32 || !bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Fatalf("keys %x %x %x", a, b, c)
	}
	if consoleCSRFKey(Config{}) != nil {
		t.Fatal("a key without credentials: want a random one per process")
	}
}
