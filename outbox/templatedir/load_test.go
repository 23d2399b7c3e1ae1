package templatedir_test

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postbox/postbox/outbox/templatedir"
)

// goodKind is a receipt folder that loads; cases change one file.
var goodKind = map[string]string{
	"receipt/subject.tmpl": "Receipt {{.order_id}}\n",
	"receipt/text.tmpl":    "Hello {{.name}},\nthank you.\n",
	"receipt/html.tmpl":    "<p>Hello {{.name}},</p>\n<p>thank you.</p>\n",
	"receipt/sample.json":  `{"to": "ada@example.com", "name": "Ada", "order_id": "ord_1"}`,
}

// writeDir writes files (path → content; "" deletes a path of goodKind)
// into a new directory.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if content == "" {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func with(changes map[string]string) map[string]string {
	files := maps.Clone(goodKind)
	maps.Copy(files, changes)
	return files
}

// A broken directory refuses to load with an error naming the file, and
// for a template or JSON error its line, relative to the directory.
func TestLoad_RefusesNamingFileAndLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error
	}{
		{"parse error", with(map[string]string{"receipt/text.tmpl": "Hello,\n\n{{.name}\n"}),
			[]string{"receipt/text.tmpl:3:"}},
		{"unknown function", with(map[string]string{"receipt/subject.tmpl": "{{upper .order_id}}"}),
			[]string{"receipt/subject.tmpl:1:", `function "upper" not defined`}},
		{"typo in a key: execution error on the sample", with(map[string]string{"receipt/html.tmpl": "<p>Hello</p>\n<p>{{.nmae}}</p>\n"}),
			[]string{"receipt/html.tmpl:2:", `map has no entry for key "nmae"`}},
		{"html that does not escape", with(map[string]string{"receipt/html.tmpl": "<a href='{{.name}}\n"}),
			[]string{"receipt/html.tmpl"}},
		{"sample that does not parse", with(map[string]string{"receipt/sample.json": "{\n  \"to\": \"ada@example.com\",\n  \"name\": Ada\n}"}),
			[]string{"receipt/sample.json:3:"}},
		{"sample that Enqueue would refuse", with(map[string]string{"receipt/sample.json": `{"name": "Ada", "order_id": "1"}`}),
			[]string{"receipt/sample.json", "payload.to is required"}},
		{"no subject.tmpl", with(map[string]string{"receipt/subject.tmpl": ""}), []string{"receipt/: has no subject.tmpl"}},
		{"neither text nor html", with(map[string]string{"receipt/text.tmpl": "", "receipt/html.tmpl": ""}),
			[]string{"receipt/: has neither text.tmpl nor html.tmpl"}},
		{"no sample.json", with(map[string]string{"receipt/sample.json": ""}), []string{"receipt/: has no sample.json"}},
		{"misspelt file", with(map[string]string{"receipt/body.tmpl": "x"}), []string{"receipt/body.tmpl: not a file a kind holds"}},
		{"folder that is no kind", map[string]string{"Receipt/subject.tmpl": "x"}, []string{"Receipt/: the folder name is a kind"}},
		{"broken shared partial", with(map[string]string{"_shared/footer.tmpl": "{{end}}"}), []string{"_shared/footer.tmpl:1:"}},
		{"missing partial", with(map[string]string{"receipt/text.tmpl": "{{template \"_shared/nope.tmpl\" .}}"}),
			[]string{"receipt/text.tmpl:1:", "_shared/nope.tmpl"}},
		{"secret key that is a built-in one", with(map[string]string{"receipt/kind.json": `{"secret_keys": ["setup_url"]}`}),
			[]string{"receipt/kind.json", `"setup_url" is secret in every kind already`}},
		{"secret key listed twice", with(map[string]string{"receipt/kind.json": `{"secret_keys": ["magic_link", "magic_link"]}`}),
			[]string{"receipt/kind.json", `"magic_link" is listed twice`}},
		{"kind.json with an unknown field", with(map[string]string{"receipt/kind.json": `{"secret_key": ["a"]}`}),
			[]string{"receipt/kind.json", "secret_key"}},
		{"secret key that is a kept field", with(map[string]string{"receipt/kind.json": `{"secret_keys": ["name"]}`}),
			[]string{"receipt/kind.json", `secret key "name"`}},
		{"secret key that is no identifier", with(map[string]string{"receipt/kind.json": `{"secret_keys": ["Magic-Link"]}`}),
			[]string{"receipt/kind.json", `"Magic-Link" is not a plain identifier`}},
		{"priority that is no name", with(map[string]string{"receipt/kind.json": `{"priority": "urgent"}`}),
			[]string{"receipt/kind.json", `priority is "urgent", not high, normal, low or a number from 1 to 9`}},
		{"priority out of range", with(map[string]string{"receipt/kind.json": `{"priority": 12}`}),
			[]string{"receipt/kind.json", "priority is 12"}},
		{"empty subject", with(map[string]string{"receipt/subject.tmpl": "{{/* nothing */}}\n"}),
			[]string{"receipt/subject.tmpl: rendered an empty subject"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeDir(t, tc.files)
			set, err := templatedir.Load(dir)
			if err == nil {
				t.Fatalf("Load = %v, nil; want an error naming %q", set.Kinds(), tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load error %q; want it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), dir+"/receipt") {
				t.Errorf("Load error %q names the file by its absolute path; want it relative to the directory", err)
			}
		})
	}
}

func TestLoad_MissingDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nope")
	if _, err := templatedir.Load(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Load(missing) = %v; want an error naming %s", err, dir)
	}
}

// Every problem is reported at once: two broken kinds, two errors.
func TestLoad_ReportsEveryBrokenKind(t *testing.T) {
	t.Parallel()
	files := with(nil)
	for name, content := range goodKind {
		files["welcome/"+strings.TrimPrefix(name, "receipt/")] = content
	}
	files["receipt/text.tmpl"] = "{{.missing_one}}"
	files["welcome/text.tmpl"] = "{{if}}"
	_, err := templatedir.Load(writeDir(t, files))
	if err == nil || !strings.Contains(err.Error(), "receipt/text.tmpl:1:") || !strings.Contains(err.Error(), "welcome/text.tmpl:1:") {
		t.Fatalf("Load = %v; want both receipt/text.tmpl:1 and welcome/text.tmpl:1", err)
	}
}

func TestLoad_ListsKinds(t *testing.T) {
	t.Parallel()
	files := with(map[string]string{
		"invoice/subject.tmpl":   "Invoice {{.invoice_number}}",
		"invoice/text.tmpl":      "Due: {{.amount_due}}",
		"invoice/sample.json":    `{"to": "ada@example.com", "subject": "s", "invoice_number": "INV-1"}`,
		"_drafts/subject.tmpl":   "{{ broken",
		"notes.txt":              "not a kind",
		"receipt/.editor.swp":    "hidden",
		"_shared/unused.txt":     "not a template",
		"_shared/partial.tmpl":   `{{define "sig"}}-- shop{{end}}`,
		"receipt/html.tmpl":      `<p>{{.name}}</p>{{template "sig"}}`,
		"receipt/subject.tmpl":   "Receipt {{.order_id}}",
		"receipt/sample.json":    `{"to": "ada@example.com", "name": "Ada", "order_id": "ord_1", "magic_link_url": "https://x.example/m"}`,
		"receipt/text.tmpl":      "",
		"member_invite/.gitkeep": "",
	})
	set, err := templatedir.Load(writeDir(t, files))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range set.Kinds() {
		got = append(got, string(k.Kind)+"="+k.Source+"["+strings.Join(k.Files, ",")+"]("+strings.Join(k.SecretKeys, ",")+")")
	}
	want := []string{
		"invoice=directory (replaces built-in)[invoice/sample.json,invoice/subject.tmpl,invoice/text.tmpl]()",
		"member_invite=built-in[]()",
		"password_reset=built-in[]()",
		"raw=built-in[]()",
		"receipt=directory[receipt/html.tmpl,receipt/sample.json,receipt/subject.tmpl]()",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Kinds:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var out strings.Builder
	if err := set.WriteList(&out); err != nil || !strings.Contains(out.String(), "receipt/html.tmpl") {
		t.Fatalf("WriteList: %v\n%s", err, out.String())
	}
}
