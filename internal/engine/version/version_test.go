package version

import (
	"strings"
	"testing"
)

func TestStampWins(t *testing.T) {
	old, oldRev := stamp, stampRevision
	t.Cleanup(func() { stamp, stampRevision = old, oldRev })

	stamp, stampRevision = "", ""
	if v := Get().Version; v == "" {
		t.Fatal("unstamped build has no version")
	}
	stamp, stampRevision = "v9.9.9", "abc123"
	got := Get()
	if got.Version != "v9.9.9" || got.Revision != "abc123" {
		t.Fatalf("stamped build = %+v", got)
	}
	if s := got.String(); !strings.HasPrefix(s, "v9.9.9 (revision abc123") || !strings.Contains(s, got.GoVersion) {
		t.Fatalf("String() = %q", s)
	}
}
