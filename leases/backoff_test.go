package leases

import (
	"testing"
	"time"
)

func TestEmailBackoffSchedule(t *testing.T) {
	t.Parallel()
	if len(EmailBackoff) != 15 {
		t.Fatalf("EmailBackoff has %d slots, want 15", len(EmailBackoff))
	}
	if total := EmailBackoff.Total(); total < 70*time.Hour || total > 74*time.Hour {
		t.Fatalf("EmailBackoff totals %s, want about 72h", total)
	}
	for i := 1; i < len(EmailBackoff); i++ {
		if EmailBackoff[i] < EmailBackoff[i-1] {
			t.Errorf("slot %d (%s) shorter than slot %d (%s)", i, EmailBackoff[i], i-1, EmailBackoff[i-1])
		}
	}
}

func TestBackoffNext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempts int
		ok       bool
	}{{0, false}, {1, true}, {15, true}, {16, false}} {
		wait, ok := EmailBackoff.Next(tc.attempts)
		if ok != tc.ok {
			t.Errorf("Next(%d) ok = %v, want %v", tc.attempts, ok, tc.ok)
		}
		if ok {
			base := EmailBackoff[tc.attempts-1]
			if wait < base*9/10 || wait > base*11/10 {
				t.Errorf("Next(%d) = %s, outside ±10%% of %s", tc.attempts, wait, base)
			}
		}
	}
}
