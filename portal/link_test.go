package portal

import (
	"strings"
	"testing"
	"time"
)

// Link refuses what would make a link that can never open, or one that
// opens for too long, naming what is wrong.
func TestLink_RefusesBadInput(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	for _, tc := range []struct {
		name   string
		key    []byte
		tenant string
		ttl    time.Duration
		want   string
	}{
		{"no tenant", key, "", 0, "needs a tenant"},
		{"a control character", key, "ac\x01me", 0, "control characters"},
		{"a short key", []byte("short"), "acme", 0, "want at least 32"},
		{"a negative ttl", key, "acme", -time.Second, "ttl"},
		{"a week", key, "acme", 7 * 24 * time.Hour, "ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Link(tc.key, tc.tenant, tc.ttl); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}
