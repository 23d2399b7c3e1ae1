package pgtext

import (
	"strings"
	"testing"
)

// Actor cuts who on a rune boundary: 100 "€" (300 bytes) keep the 66
// runes that fit in MaxActor bytes, never half of the 67th.
func TestActor(t *testing.T) {
	t.Parallel()
	if got, want := Actor(strings.Repeat("€", 100)), strings.Repeat("€", 66); got != want {
		t.Fatalf("Actor(100 €) = %q (%d bytes); want %q", got, len(got), want)
	}
	if got := Actor("alice"); got != "alice" {
		t.Fatalf("Actor(alice) = %q", got)
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		in      string
		max     int
		want    string
		wantCut bool
	}{
		{"empty", "", 10, "", false},
		{"short", "451 try later", 20, "451 try later", false},
		{"invalid utf-8 replaced", "a\xffb", 10, "a\uFFFDb", false},
		{"NUL dropped", "a\x00b", 10, "ab", false},
		{"exactly the cap", strings.Repeat("x", 10), 10, strings.Repeat("x", 10), false},
		{"cut on a rune boundary", "x" + strings.Repeat("é", 10), 10, "x" + strings.Repeat("é", 4), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, cut := Clean(tc.in, tc.max)
			if got != tc.want || cut != tc.wantCut {
				t.Fatalf("Clean(%q, %d) = %q, %v; want %q, %v", tc.in, tc.max, got, cut, tc.want, tc.wantCut)
			}
		})
	}
}
