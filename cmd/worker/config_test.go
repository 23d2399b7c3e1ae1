package main

import (
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
		{"half River UI auth", map[string]string{"RIVERUI_USERNAME": "admin"}, "RIVERUI_PASSWORD"},
		{"lease chain broken", map[string]string{"EMAIL_BATCH_TIMEOUT": "360s"}, "BatchTimeout < ClaimLease(BatchSize)"},
		{"bad DATABASE_URL", map[string]string{"DATABASE_URL": "postgres://%zz"}, "DATABASE_URL"},
		{"malformed key ring", map[string]string{"OUTBOX_ENCRYPTION_KEYS": "k1:c2hvcnQ="}, "OUTBOX_ENCRYPTION_KEYS: entry 1"},
		{"bad RETRY_BACKOFF_SCALE", map[string]string{"RETRY_BACKOFF_SCALE": "2"}, "RETRY_BACKOFF_SCALE"},
		{"compressed backoff in production", map[string]string{"RETRY_BACKOFF_SCALE": "0.5", "APP_ENV": "production"}, "RETRY_BACKOFF_SCALE"},
		{"bad WEBHOOK_ALLOWED_CIDRS", map[string]string{"WEBHOOK_ALLOWED_CIDRS": "10.0.0.0/33"}, "WEBHOOK_ALLOWED_CIDRS"},
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
