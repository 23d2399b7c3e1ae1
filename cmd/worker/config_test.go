package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfigNamesBadVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // substring of the error; empty = no error
	}{
		{"defaults", nil, ""},
		{"bad SMTP_TLS", map[string]string{"SMTP_TLS": "bogus"}, "SMTP_TLS"},
		{"bad APP_ENV", map[string]string{"APP_ENV": "prod"}, "APP_ENV"},
		{"bad HTTP_ADDR", map[string]string{"HTTP_ADDR": "8080"}, "HTTP_ADDR"},
		{"bad LOG_LEVEL", map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{"bad SHUTDOWN_TIMEOUT", map[string]string{"SHUTDOWN_TIMEOUT": "-1s"}, "SHUTDOWN_TIMEOUT"},
		{"bad POLL_INTERVAL", map[string]string{"POLL_INTERVAL": "often"}, "POLL_INTERVAL"},
		{"zero EMAIL_CONCURRENCY", map[string]string{"EMAIL_CONCURRENCY": "0"}, "EMAIL_CONCURRENCY"},
		{"non-numeric EMAIL_CONCURRENCY", map[string]string{"EMAIL_CONCURRENCY": "lots"}, "EMAIL_CONCURRENCY"},
		{"negative EMAIL_RATE_LIMIT", map[string]string{"EMAIL_RATE_LIMIT": "-1"}, "EMAIL_RATE_LIMIT"},
		{"EMAIL_RATE_LIMIT with a unit", map[string]string{"EMAIL_RATE_LIMIT": "50/s"}, "EMAIL_RATE_LIMIT"},
		{"EMAIL_RATE_LIMIT past its bound", map[string]string{"EMAIL_RATE_LIMIT": "1e6"}, "EMAIL_RATE_LIMIT"},
		{"EMAIL_RATE_LIMIT of 14.5", map[string]string{"EMAIL_RATE_LIMIT": "14.5"}, ""},
		{"half River UI auth", map[string]string{"RIVERUI_USERNAME": "admin"}, "RIVERUI_PASSWORD"},
		{"lease chain broken", map[string]string{"EMAIL_BATCH_TIMEOUT": "360s"}, "BatchTimeout < ClaimLease(BatchSize)"},
		{"bad DATABASE_URL", map[string]string{"DATABASE_URL": "postgres://%zz"}, "DATABASE_URL"},
		{"malformed key ring", map[string]string{"OUTBOX_ENCRYPTION_KEYS": "k1:c2hvcnQ="}, "OUTBOX_ENCRYPTION_KEYS: entry 1"},
		{"bad RETRY_BACKOFF_SCALE", map[string]string{"RETRY_BACKOFF_SCALE": "2"}, "RETRY_BACKOFF_SCALE"},
		{"bad OPS_EMAIL", map[string]string{"OPS_EMAIL": "ops at example.com"}, "OPS_EMAIL"},
		{"bad OPS_WEBHOOK_ENDPOINT_ID", map[string]string{"OPS_WEBHOOK_ENDPOINT_ID": "ep_1"}, "OPS_WEBHOOK_ENDPOINT_ID"},
		{"breaker cap under the cool-down", map[string]string{"WEBHOOK_BREAKER_COOLDOWN": "2h"}, "WEBHOOK_BREAKER_MAX_COOLDOWN"},
		{"breaker rate over 100", map[string]string{"WEBHOOK_BREAKER_FAILURE_RATE": "150"}, "WEBHOOK_BREAKER_FAILURE_RATE"},
		{"the breaker's old streak", map[string]string{"WEBHOOK_BREAKER_FAILURES": "5"}, "WEBHOOK_BREAKER_FAILURES"},
		{"plaintext SMTP in production", map[string]string{"SMTP_TLS": "none", "APP_ENV": "production"}, "SMTP_TLS=none"},
		{"plaintext SMTP outside production", map[string]string{"SMTP_TLS": "none", "APP_ENV": "development"}, ""},
		{"compressed backoff in production", map[string]string{"RETRY_BACKOFF_SCALE": "0.5", "APP_ENV": "production"}, "RETRY_BACKOFF_SCALE"},
		{"bad WEBHOOK_ALLOWED_CIDRS", map[string]string{"WEBHOOK_ALLOWED_CIDRS": "10.0.0.0/33"}, "WEBHOOK_ALLOWED_CIDRS"},
		{"NaN RETRY_BACKOFF_SCALE", map[string]string{"RETRY_BACKOFF_SCALE": "NaN"}, `RETRY_BACKOFF_SCALE="NaN": must be a finite number in (0, 1]`},
		{"infinite RETRY_BACKOFF_SCALE", map[string]string{"RETRY_BACKOFF_SCALE": "-Inf"}, "RETRY_BACKOFF_SCALE"},
		{"NaN EMAIL_RATE_LIMIT", map[string]string{"EMAIL_RATE_LIMIT": "NaN"}, "EMAIL_RATE_LIMIT"},
		{"infinite EMAIL_RATE_LIMIT", map[string]string{"EMAIL_RATE_LIMIT": "+Inf"}, "EMAIL_RATE_LIMIT"},
		{"LEASE_SLACK too short for a webhook mark", map[string]string{"LEASE_SLACK": "1s"}, "MarkTimeout < LeaseSlack does not hold (5s ≥ 1s (LEASE_SLACK))"},
		{"WEBHOOK_USER_AGENT with a CR LF", map[string]string{"WEBHOOK_USER_AGENT": "acme\r\nX-Injected: 1"}, "WEBHOOK_USER_AGENT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadConfig(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("LoadConfig: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("LoadConfig error = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

// TestFileVariables: DATABASE_URL, SMTP_PASSWORD and RIVERUI_PASSWORD can
// come from the file NAME_FILE names (compose and Kubernetes secrets),
// without its trailing newline; every mistake names the variable.
func TestFileVariables(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	url := write("url", "postgres://postbox@db:5432/postbox?sslmode=disable\n")
	smtpPass := write("smtp", "s3cret with spaces \r\n")
	uiPass := write("ui", "change-me")
	empty := write("empty", "\n")

	load := func(env map[string]string) (Config, error) {
		return LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	}
	c, err := load(map[string]string{"DATABASE_URL_FILE": url, "SMTP_PASSWORD_FILE": smtpPass,
		"SMTP_USERNAME": "u", "RIVERUI_USERNAME": "admin", "RIVERUI_PASSWORD_FILE": uiPass})
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://postbox@db:5432/postbox?sslmode=disable" {
		t.Errorf("DatabaseURL = %q", c.DatabaseURL)
	}
	if c.SMTP.Password != "s3cret with spaces " {
		t.Errorf("SMTP password = %q: want the file's content without its line ending only", c.SMTP.Password)
	}
	if c.RiverUIPassword != "change-me" {
		t.Errorf("RiverUIPassword = %q", c.RiverUIPassword)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"missing file", map[string]string{"SMTP_PASSWORD_FILE": filepath.Join(dir, "nope")}, "SMTP_PASSWORD_FILE: open"},
		{"empty file", map[string]string{"DATABASE_URL_FILE": empty}, "DATABASE_URL_FILE=" + empty + ": the file is empty"},
		{"both set", map[string]string{"RIVERUI_PASSWORD": "x", "RIVERUI_PASSWORD_FILE": uiPass}, "RIVERUI_PASSWORD and RIVERUI_PASSWORD_FILE are both set"},
		{"bad URL in file", map[string]string{"DATABASE_URL_FILE": write("bad", "postgres://%zz\n")}, "DATABASE_URL"},
	} {
		if _, err := load(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
