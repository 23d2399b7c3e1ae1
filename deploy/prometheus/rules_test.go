package prometheus_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/markdown"
	"github.com/postbox/postbox/internal/tooling/testsupport/metricnames"
)

const rulesFile = "postbox-alerts.yml"

// promtool finds promtool (PROMTOOL_BIN, then PATH). Like the Mailpit and
// chromium tests, it skips without one locally and fails under CI, so CI
// cannot go green by not running the rule tests.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	const how = "promtool not found (PROMTOOL_BIN, PATH); install it with: apt-get install -y prometheus"
	if os.Getenv("CI") != "" {
		t.Fatal(how)
	}
	t.Skip(how)
	return ""
}

func TestRules_Promtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", "postbox-alerts.test.yml"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

var (
	alertName = regexp.MustCompile(`(?m)^\s*- alert: (\S+)`)
	runbook   = regexp.MustCompile(`runbook: "docs/OPERATIONS\.md#([a-z0-9-]+)"`)
)

// unknownMetrics returns the postbox_ metric names in rules' expressions
// that the code does not register.
func unknownMetrics(rules string, names map[string]bool) []string {
	var exprs []string
	for _, line := range strings.Split(rules, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.Contains(line, "alert:") ||
			strings.Contains(line, "summary:") || strings.Contains(line, "description:") {
			continue
		}
		exprs = append(exprs, line)
	}
	return metricnames.Unknown(names, exprs...)
}

func TestRules_MetricNamesAreRegistered(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	names, err := metricnames.Registered("../..")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		rules string
		want  []string
	}{
		{"the checked-in rules", string(src), nil},
		// The check itself must be able to fail: a misspelt metric is reported.
		{"a misspelt metric", "expr: rate(postbox_stale_mark_total[5m]) > 0\n", []string{"postbox_stale_mark_total"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := unknownMetrics(tt.rules, names); !slices.Equal(got, tt.want) {
				t.Errorf("metrics not registered by the code: got %v, want %v", got, tt.want)
			}
		})
	}
}

// The doc lists alerts by name with the why; the expressions live only in
// the rules file. Each alert must be named in the doc, and each runbook
// must point at a section that exists.
func TestRules_AgreeWithOperationsDoc(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[markdown.Anchor(h)] = true
		}
	}
	for _, m := range alertName.FindAllStringSubmatch(string(rules), -1) {
		if !strings.Contains(string(doc), "`"+m[1]+"`") {
			t.Errorf("alert %s is not listed in docs/OPERATIONS.md", m[1])
		}
	}
	for _, m := range runbook.FindAllStringSubmatch(string(rules), -1) {
		if !anchors[m[1]] {
			t.Errorf("runbook anchor #%s is not a section of docs/OPERATIONS.md", m[1])
		}
	}
}
