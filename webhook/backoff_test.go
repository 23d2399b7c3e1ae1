package webhook

import (
	"net/http"
	"testing"
	"time"
)

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}
	if len(DefaultBackoff) != len(want) {
		t.Fatalf("DefaultBackoff has %d slots, want %d (8 attempts)", len(DefaultBackoff), len(want))
	}
	for i := range want {
		if DefaultBackoff[i] != want[i] {
			t.Errorf("slot %d = %s, want %s", i, DefaultBackoff[i], want[i])
		}
	}
	for attempts := 1; attempts <= len(want); attempts++ {
		wait, ok := DefaultBackoff.Next(attempts)
		if base := want[attempts-1]; !ok || wait < base*9/10 || wait > base*11/10 {
			t.Errorf("Next(%d) = %s, %v; want %s ±10%%", attempts, wait, ok, base)
		}
	}
	if _, ok := DefaultBackoff.Next(len(want) + 1); ok {
		t.Error("schedule does not end: attempts are unbounded")
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		status int
		value  string
		want   time.Duration
		ok     bool
	}{
		{"seconds", 429, "120", 120 * time.Second, true},
		{"503", 503, "30", 30 * time.Second, true},
		{"clamped up", 429, "0", MinRetryAfter, true},
		{"clamped down", 503, "86400", MaxRetryAfter, true},
		{"huge", 503, "99999999999999999", MaxRetryAfter, true},
		{"beyond int64", 503, "99999999999999999999", 0, false},
		{"date", 503, now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"date in the past", 503, now.Add(-time.Hour).Format(http.TimeFormat), MinRetryAfter, true},
		{"negative", 429, "-5", 0, false},
		{"garbage", 429, "soon", 0, false},
		{"missing", 429, "", 0, false},
		{"other status", 500, "120", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tc.value != "" {
				h.Set("Retry-After", tc.value)
			}
			got, ok := retryAfter(tc.status, h, now)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("retryAfter = %s, %v; want %s, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
