package engine_test

import (
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/pgtext"
)

// TestTally_ErrorsCapped: a Tally is a River job's recorded output, and
// its error texts come from relays, receivers and panic values, which can
// be megabytes. Each is kept capped like a last_error,
// whether noted directly or added from another Tally.
func TestTally_ErrorsCapped(t *testing.T) {
	t.Parallel()
	const limit = pgtext.MaxLastError + len("…")
	huge := "HTTP 302 redirect not followed (Location: " + strings.Repeat("x", 5<<20) + ")"

	var direct engine.Tally
	direct.NoteError(huge)
	var added engine.Tally
	added.Add(engine.Tally{Errors: []string{huge + " again"}})
	for name, tally := range map[string]engine.Tally{"NoteError": direct, "Add": added} {
		if len(tally.Errors) != 1 {
			t.Fatalf("%s kept %d errors, want 1", name, len(tally.Errors))
		}
		if e := tally.Errors[0]; len(e) > limit || !strings.HasPrefix(e, "HTTP 302 redirect not followed") {
			t.Errorf("%s kept an error of %d bytes (%.40q…), want at most %d and its start", name, len(e), e, limit)
		}
	}
}
