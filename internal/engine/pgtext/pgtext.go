// Package pgtext makes text from outside — relay replies, receivers'
// response bodies, wrapped errors — storable in a Postgres text column.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Clean returns s with invalid UTF-8 replaced by U+FFFD and NUL bytes
// dropped, both of which a text column refuses, cut to at most maxBytes on
// a rune boundary. cut reports whether anything was cut off. A value the
// column refused would fail the whole statement that records it.
func Clean(s string, maxBytes int) (clean string, cut bool) {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= maxBytes {
		return s, false
	}
	n := maxBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// MaxActor caps who did something, as the outboxes store it
// (cancelled_by, requeued_by, a suppression's created_by and its log):
// the columns' CHECKs allow 200 bytes.
const MaxActor = 200

// Actor is who as those columns store it: cleaned and cut on a rune
// boundary (see Clean) to MaxActor bytes. One rule for every outbox.
func Actor(who string) string {
	who, _ = Clean(who, MaxActor)
	return who
}

// MaxLastError caps every stored and logged error text (last_error, the
// webhook attempt log's error): relay replies, receivers' headers and
// wrapped errors can be megabytes.
const MaxLastError = 2000

// LastError is s as a last_error column stores it, and as logs print it:
// cleaned (see Clean) and capped at MaxLastError, with "…" where it was cut.
// One rule for every outbox.
func LastError(s string) string {
	s, cut := Clean(s, MaxLastError)
	if cut {
		s += "…"
	}
	return s
}
