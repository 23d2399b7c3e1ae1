package mailevents

import (
	"cmp"
	"testing"
)

// TestCorrelation: the row id is read from postbox's Message-ID shape and
// the X-Postbox-Row header only; in a bounce dump the header wins, else the
// quoted original's Message-ID (the last of postbox's shape), never the
// report's own.
func TestCorrelation(t *testing.T) {
	t.Parallel()
	const row = "2f0c5a8e-6d0b-4a51-8d4e-0c1f9b7a3e21"
	for _, tc := range []struct {
		name, got, want string
	}{
		{"Message-ID", rowFromMessageID("<" + row + "@mail.example.com>"), row},
		{"Message-ID with spaces", rowFromMessageID("  <" + row + "@x>  "), row},
		{"Message-ID, no brackets", rowFromMessageID(row + "@x"), row},
		{"a provider's Message-ID", rowFromMessageID("<0102017f.abc@email.amazonses.com>"), ""},
		{"no @", rowFromMessageID("<" + row + ">"), ""},
		{"header", rowFromHeader(" " + row + " "), row},
		{"header, not a row id", rowFromHeader("42"), ""},
		{"dump with header", rowFromDump("Message-ID: <1a2b3c4d-0000-4000-8000-00000000000a@mx>\n\nx-postbox-row: " + row + "\n"), row},
		{"dump, original's Message-ID", rowFromDump("Message-ID: <report@mx.example.net>\n\nMessage-Id: <" + row + "@example.com>\n"), row},
		{"dump, nothing", rowFromDump("Subject: hi\n\nbody"), ""},
		{"first candidate", cmp.Or("", row, "other"), row},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q; want %q", tc.name, tc.got, tc.want)
		}
	}
}
