package httpapi

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// openapi.yaml describes exactly the operations Routes serves: each
// tenant operation at both of its paths, every operation with an id, a
// summary and its answers, no path or method of its own.
func TestOpenAPI_DescribesEveryRoute(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                               `yaml:"openapi"`
		Servers []struct{ URL string }               `yaml:"servers"`
		Paths   map[string]map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") || len(doc.Servers) != 1 || doc.Servers[0].URL != Prefix {
		t.Fatalf("openapi %q, servers %v: want 3.1 at %s", doc.OpenAPI, doc.Servers, Prefix)
	}
	var want, got []string
	for _, rt := range Routes {
		want = append(want, strings.ToLower(rt.Method)+" "+rt.Path)
		if rt.Access == Tenant {
			want = append(want, strings.ToLower(rt.Method)+" "+TenantPrefix+rt.Path)
		}
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			got = append(got, method+" "+path)
			for _, field := range []string{"operationId", "summary", "responses", "security"} {
				if op[field] == nil {
					t.Errorf("%s %s has no %s", method, path, field)
				}
			}
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("openapi.yaml describes\n%s\nthe routes are\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
