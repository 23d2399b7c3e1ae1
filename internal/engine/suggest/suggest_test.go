package suggest

import "testing"

func TestNearest(t *testing.T) {
	t.Parallel()
	commands := []string{"run", "demo", "migrate", "show", "stats", "failed", "requeue", "invoice.paid"}
	for _, tc := range []struct {
		in, want string
	}{
		{"stat", "stats"},
		{"shwo", "show"},
		{"requeeu", "requeue"},
		{"STATS", "stats"},
		{"invoice.piad", "invoice.paid"},
		{"nope", ""}, // two edits from "show": too far for four letters
		{"x", ""},    // one letter names nothing
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			if got := Nearest(tc.in, commands); got != tc.want {
				t.Fatalf("Nearest(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
