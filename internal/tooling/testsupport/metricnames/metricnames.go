// Package metricnames checks that what reads postbox's metrics (the alert
// rules, the Grafana dashboard) names metrics the code registers: a typo,
// or a metric renamed in the code, would otherwise leave an alert that
// never fires or a panel that stays empty.
package metricnames

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

var (
	inQuery     = regexp.MustCompile(`\bpostbox_[a-z0-9_]+\b`)
	codeLiteral = regexp.MustCompile(`"(postbox_[a-z0-9_]+)"`)
)

// Registered is every "postbox_…" string literal in the non-test Go
// sources under root (the module): a superset of the metric names the
// code registers (it also holds a few table and job names), which is
// enough to catch a query that names a metric nobody exports.
func Registered(root string) (map[string]bool, error) {
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range codeLiteral.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
		return nil
	})
	return names, err
}

// InQuery is the postbox_ series names a PromQL expression reads, each
// once, in order of appearance.
func InQuery(q string) []string {
	var out []string
	for _, m := range inQuery.FindAllString(q, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// Unknown is the names InQuery finds in the queries that are not in
// registered, each once. A histogram's series (_bucket, _sum, _count)
// count as its metric's.
func Unknown(registered map[string]bool, queries ...string) []string {
	known := func(m string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m, suffix); ok && registered[base] {
				return true
			}
		}
		return false
	}
	var out []string
	for _, q := range queries {
		for _, m := range InQuery(q) {
			if !known(m) && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}
