package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/markdown"
)

// summaryMaxLines is "one page": the summary PERFORMANCE.md opens with
// must stay short enough to read before the log it summarises.
const summaryMaxLines = 80

var inPageLink = regexp.MustCompile(`\]\(#([^)]+)\)`)

// TestPerformance_SummaryFirstAndCitesItsSections checks that
// docs/PERFORMANCE.md opens with its summary of current figures and
// sizing rules, that the summary fits a page, that it cites the sections
// its figures come from, and that every in-page link of the page (the
// summary's citations among them) names a heading that exists.
func TestPerformance_SummaryFirstAndCitesItsSections(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "PERFORMANCE.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	anchors := map[string]bool{}
	var sections []int // line index of each "## " heading
	for i, line := range lines {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			anchors[markdown.Anchor(strings.TrimSpace(strings.TrimLeft(h, "#")))] = true
		}
		if strings.HasPrefix(line, "## ") {
			sections = append(sections, i)
		}
	}
	if len(sections) < 2 || !strings.HasPrefix(lines[sections[0]], "## Summary") {
		t.Fatalf("PERFORMANCE.md's first section is not its summary: %q", lines[sections[0]])
	}
	summary := strings.Join(lines[sections[0]:sections[1]], "\n")
	if n := sections[1] - sections[0]; n > summaryMaxLines {
		t.Errorf("the summary is %d lines, more than a page (%d)", n, summaryMaxLines)
	}
	if cited := inPageLink.FindAllString(summary, -1); len(cited) < 10 {
		t.Errorf("the summary cites %d sections; each figure must cite the section it comes from", len(cited))
	}
	for _, m := range inPageLink.FindAllStringSubmatch(string(src), -1) {
		if !anchors[m[1]] {
			t.Errorf("PERFORMANCE.md links #%s, which is no heading of the page", m[1])
		}
	}
}
