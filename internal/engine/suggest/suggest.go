// Package suggest names the candidate a mistyped name most likely meant:
// the "did you mean" of an unknown command, variable or event type.
package suggest

import "strings"

// Nearest is the candidate closest to s by edit distance, when it is close
// enough to be a typo (at most a third of s's length, and at least one
// edit). Empty when nothing is that close.
func Nearest(s string, candidates []string) string {
	best, bestDist := "", max(len(s)/3, 1)+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// DidYouMean is "; did you mean X?" for the nearest candidate, or "".
func DidYouMean(s string, candidates []string) string {
	if n := Nearest(s, candidates); n != "" {
		return "; did you mean " + n + "?"
	}
	return ""
}

// editDistance is the optimal-string-alignment distance between a and b,
// in bytes (the names are ASCII): insertions, deletions, substitutions and
// swaps of two neighbours (SMPT for SMTP) count one each.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
