package main

import (
	"slices"
	"testing"
)

// A set variable that looks like postbox's but is not read is reported with
// the one it most likely meant; postbox's own and other programs' are not.
func TestUnknownVariables(t *testing.T) {
	t.Parallel()
	got := unknownVariables([]string{"EMAIL_CONCURENCY", "SMPT_HOST", "SMTP_HOST", "EMAIL_CONCURRENCY",
		"WEBHOOK_SOMETHING_NEW", "HOME", "PATH", "HTTP_PROXY", "DATABASE_URL"})
	want := []unknownVariable{
		{Name: "EMAIL_CONCURENCY", Nearest: "EMAIL_CONCURRENCY"},
		{Name: "SMPT_HOST", Nearest: "SMTP_HOST"},
		{Name: "WEBHOOK_SOMETHING_NEW"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("unknownVariables = %+v, want %+v", got, want)
	}
	if !slices.Contains(knownVariables(), "SOFT_BOUNCE_LIMIT") || !slices.Contains(knownVariables(), "SMTP_PASSWORD_FILE") {
		t.Fatalf("knownVariables misses what LoadConfig reads: %v", knownVariables())
	}
}
