package docs

import (
	"go/ast"
	"go/token"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tableOwners names, for every table the migrations create, the one
// package whose SQL may name it (ARCHITECTURE.md, Layers: each transport
// package owns its tables and their SQL). Everyone else calls that
// package's functions. The engine's generic code (a claim, a sweep, a
// history partition) takes a table's name as a parameter and names none.
var tableOwners = map[string]string{
	"email_outbox":              "outbox",
	"email_attempts":            "outbox",
	"email_events":              "outbox",
	"email_kind_priorities":     "outbox",
	"email_requeues":            "outbox",
	"email_secret_keys":         "outbox",
	"email_suppressions":        "outbox",
	"email_suppression_log":     "outbox",
	"webhook_outbox":            "webhook",
	"webhook_events":            "webhook",
	"webhook_deliveries":        "webhook",
	"webhook_delivery_attempts": "webhook",
	"webhook_endpoints":         "webhook",
	"webhook_endpoint_secrets":  "webhook",
	"webhook_event_types":       "webhook",
	"postbox_gates":             "internal/engine",
	"postbox_history_dropped":   "internal/engine/history",
	"postbox_rate_buckets":      "internal/engine/claim",
	"portal_audit":              "internal/operator/portalaudit",
	"portal_link_uses":          "internal/operator/portalsite",
}

// sqlElsewhere are the string literals allowed to name a table outside
// its owner, by file and table, each with its reason.
var sqlElsewhere = map[string]string{
	// The demo stands for another service, in another language, that
	// enqueues with a plain INSERT: the table is that service's API
	// (docs/OPERATIONS.md), and the demo shows it working.
	"internal/operator/demo/world.go email_outbox": "the demo's plain-SQL producer",
}

// sqlKeyword is what makes a string literal SQL rather than a name or a
// message: the module writes its SQL keywords in capitals, and its
// messages ("a failed email_outbox row", "from webhook_outbox row …") in
// lower case.
var sqlKeyword = regexp.MustCompile(`\b(SELECT|INSERT|UPDATE|DELETE|TRUNCATE|FROM|JOIN|INTO)\b`)

// TestSQL_OnlyTheOwnerNamesItsTables reads every string literal of the
// shipped code but the migrations (which make every table) and fails on
// SQL that names a table outside the package owning it (tableOwners): a
// reader of outbox/ then sees every statement on email_outbox, and a
// column changed there cannot break a query elsewhere unseen.
func TestSQL_OnlyTheOwnerNamesItsTables(t *testing.T) {
	t.Parallel()
	if got := migratedTables(t); !slices.Equal(got, sortedKeys(tableOwners)) {
		t.Errorf("the migrations create %v; tableOwners names %v: give every table its owner", got, sortedKeys(tableOwners))
	}
	names := regexp.MustCompile(`\b(` + strings.Join(sortedKeys(tableOwners), "|") + `)\b`)
	allowed := map[string]bool{}
	parseModule(t, 0, func(p string, fset *token.FileSet, f *ast.File) {
		rel := shippedPath(t, p)
		if rel == "" || strings.HasPrefix(rel, "migrations/") {
			return
		}
		pkg := path.Dir(rel)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !sqlKeyword.MatchString(s) {
				return true
			}
			for _, table := range names.FindAllString(s, -1) {
				owner := tableOwners[table]
				if owner == pkg {
					continue
				}
				if sqlElsewhere[rel+" "+table] != "" {
					allowed[rel+" "+table] = true
				} else {
					t.Errorf("%s:%d: SQL names %s, which %s owns: move the statement there and call it",
						rel, fset.Position(lit.Pos()).Line, table, owner)
				}
			}
			return true
		})
	})
	for k := range sqlElsewhere {
		if !allowed[k] {
			t.Errorf("sqlElsewhere allows %q, which no longer names it: drop the entry", k)
		}
	}
}

// migratedTables are the tables the migrations create, sorted.
func migratedTables(t *testing.T) []string {
	t.Helper()
	create := regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)\s*\(`)
	seen := map[string]bool{}
	for _, p := range repoFiles(t) {
		if !strings.HasPrefix(p, "migrations/sql/") || !strings.HasSuffix(p, ".sql") {
			continue
		}
		src, ok := readText(t, p)
		if !ok {
			continue
		}
		for _, m := range create.FindAllSubmatch(src, -1) {
			seen[string(m[1])] = true
		}
	}
	return sortedKeys(seen)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
