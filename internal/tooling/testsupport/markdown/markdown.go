// Package markdown holds what the tests that read the repository's pages
// need to agree on with GitHub, which renders them.
package markdown

import "strings"

// Anchor is GitHub's anchor for a heading: lower case, spaces to hyphens,
// punctuation other than hyphens and underscores dropped ("Latency commit
// → DATA" is #latency-commit--data).
func Anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
