package grafana_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/postbox/postbox/internal/tooling/testsupport/metricnames"
)

// dashboard is the part of Grafana's dashboard model the checks read.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// flatten is every panel, rows' nested ones included.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("postbox.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("postbox.json: %v", err)
	}
	return d
}

// alertMetrics is the postbox_ metrics the alert rules read.
func alertMetrics(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../prometheus/postbox-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, m := range metricnames.InQuery(r.Expr) {
				if !slices.Contains(names, m) {
					names = append(names, m)
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no metric found in the alert rules")
	}
	return names
}

// TestDashboard checks deploy/grafana/postbox.json: every query names only
// metrics the code registers; together the queries read every metric an
// alert rule reads, so a paged operator finds each alert's numbers on it;
// every panel asks the dashboard's Prometheus variable, and panel ids are
// unique (Grafana renumbers duplicates, breaking links to a panel).
func TestDashboard(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed for a stable import", d.UID, d.Title)
	}
	registered, err := metricnames.Registered("../..")
	if err != nil {
		t.Fatal(err)
	}

	var exprs []string
	ids := map[int]string{}
	for _, p := range flatten(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query the dashboard's datasource variable: %+v", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if len(metricnames.InQuery(q.Expr)) == 0 {
				t.Errorf("panel %q query %s reads no postbox metric: %q", p.Title, q.RefID, q.Expr)
			}
			exprs = append(exprs, q.Expr)
		}
	}

	tests := []struct {
		name  string
		exprs []string
		want  []string
	}{
		{"the checked-in dashboard", exprs, nil},
		// The check itself must be able to fail: a misspelt metric is
		// reported, a histogram's series are not, a misspelt histogram's are.
		{"a misspelt metric", []string{"rate(postbox_stale_mark_total[5m])", "postbox_email_send_duration_seconds_bucket",
			"postbox_email_send_duraton_seconds_bucket"},
			[]string{"postbox_stale_mark_total", "postbox_email_send_duraton_seconds_bucket"}},
	}
	for _, tt := range tests {
		if got := metricnames.Unknown(registered, tt.exprs...); !slices.Equal(got, tt.want) {
			t.Errorf("%s: metrics not registered by the code: got %v, want %v", tt.name, got, tt.want)
		}
	}

	var shown []string
	for _, e := range exprs {
		shown = append(shown, metricnames.InQuery(e)...)
	}
	for _, m := range alertMetrics(t) {
		if !slices.Contains(shown, m) {
			t.Errorf("the alert rules read %s, which no panel shows", m)
		}
	}
}
