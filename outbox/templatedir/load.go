package templatedir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	texttemplate "text/template"

	"github.com/postbox/postbox/outbox"
)

// Load reads the template directory dir, parses every template and renders
// each kind against its sample.json. Any problem — a folder without
// subject.tmpl or without text.tmpl and html.tmpl, a template that does not
// parse or does not execute on its sample, a sample.json or kind.json that
// does not parse — is an error naming the file (relative to dir) and, for
// templates and JSON, the line; every problem found is reported, joined.
func Load(dir string) (*Set, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("email templates: directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("email templates: %s is not a directory", dir)
	}
	return LoadFS(os.DirFS(dir), dir)
}

// LoadFS is Load over fsys, whose root is the template directory; name is
// what messages call it (the demo loads an embedded directory).
func LoadFS(fsys fs.FS, name string) (*Set, error) {
	s := &Set{dir: name, kinds: map[outbox.Kind]*kind{}, fallback: outbox.DefaultRenderer()}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("email templates: directory %s: %w", name, err)
	}
	textBase, htmlBase, err := parseShared(fsys)
	if err != nil {
		return nil, fmt.Errorf("email templates in %s: %w", name, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "_") || strings.HasPrefix(e.Name(), ".") {
			continue // files beside the kinds (a README), shared and hidden folders
		}
		k, err := loadKind(fsys, e.Name(), textBase, htmlBase)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.kinds[k.name] = k
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("email templates in %s: %w", name, err)
	}
	return s, nil
}

// parseShared parses _shared/*.tmpl into the sets each kind's templates are
// cloned from: a file named *.html.tmpl into the HTML set only, any other
// into both. Each is named by its path, _shared/layout.html.tmpl, which is
// how a kind calls it ({{template "_shared/layout.html.tmpl" .}}) and how
// its errors name it.
func parseShared(fsys fs.FS) (*texttemplate.Template, *htmltemplate.Template, error) {
	textBase := texttemplate.New("").Option("missingkey=error")
	htmlBase := htmltemplate.New("").Option("missingkey=error")
	entries, err := fs.ReadDir(fsys, SharedDir)
	if errors.Is(err, fs.ErrNotExist) {
		return textBase, htmlBase, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tmpl") {
			continue
		}
		rel := path.Join(SharedDir, e.Name())
		src, err := fs.ReadFile(fsys, rel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := htmlBase.New(rel).Parse(string(src)); err != nil {
			errs = append(errs, err)
			continue
		}
		if !strings.HasSuffix(e.Name(), ".html.tmpl") {
			if _, err := textBase.New(rel).Parse(string(src)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return textBase, htmlBase, errors.Join(errs...)
}

// kindFiles are the files a kind's folder may hold; anything else is
// refused, so a misspelt html.tmpl is not silently a text-only email.
var kindFiles = []string{SubjectFile, TextFile, HTMLFile, SampleFile, KindFile}

func loadKind(fsys fs.FS, folder string, textBase *texttemplate.Template, htmlBase *htmltemplate.Template) (*kind, error) {
	k := &kind{name: outbox.Kind(folder)}
	if err := k.name.Validate(); err != nil {
		return nil, fmt.Errorf("%s/: the folder name is a kind, and %w", folder, err)
	}
	entries, err := fs.ReadDir(fsys, folder)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if e.IsDir() || !slices.Contains(kindFiles, e.Name()) {
			return nil, fmt.Errorf("%s/%s: not a file a kind holds (%s)", folder, e.Name(), strings.Join(kindFiles, ", "))
		}
		have[e.Name()] = true
		k.files = append(k.files, path.Join(folder, e.Name()))
	}
	slices.Sort(k.files)
	switch {
	case !have[SubjectFile]:
		return nil, fmt.Errorf("%s/: has no %s", folder, SubjectFile)
	case !have[TextFile] && !have[HTMLFile]:
		return nil, fmt.Errorf("%s/: has neither %s nor %s", folder, TextFile, HTMLFile)
	case !have[SampleFile]:
		return nil, fmt.Errorf("%s/: has no %s (a payload the kind is rendered with at boot)", folder, SampleFile)
	}
	read := func(name string) (string, string, error) {
		rel := path.Join(folder, name)
		b, err := fs.ReadFile(fsys, rel)
		return rel, string(b), err
	}

	var errs []error
	parseText := func(name string) (*texttemplate.Template, string) {
		rel, src, err := read(name)
		if err != nil {
			errs = append(errs, err)
			return nil, rel
		}
		t, err := texttemplate.Must(textBase.Clone()).New(rel).Parse(src)
		if err != nil {
			errs = append(errs, err)
		}
		return t, rel
	}
	k.subject, k.subjectName = parseText(SubjectFile)
	if have[TextFile] {
		k.text, k.textName = parseText(TextFile)
	}
	if have[HTMLFile] {
		rel, src, err := read(HTMLFile)
		if err == nil {
			k.html, err = htmltemplate.Must(htmlBase.Clone()).New(rel).Parse(src)
		}
		if err != nil {
			errs = append(errs, err)
		}
		k.htmlName = rel
	}
	if have[KindFile] {
		if err := k.readKindFile(fsys); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := k.renderSample(fsys); err != nil {
		return nil, err
	}
	return k, nil
}

// kindJSON is kind.json.
type kindJSON struct {
	// SecretKeys are payload keys holding secrets (single-use links,
	// tokens): sealed at rest and scrubbed once sent, like
	// outbox.SecretPayloadKeys.
	SecretKeys []string `json:"secret_keys"`
	// Priority is the kind's priority: "high", "normal", "low" or a
	// number from 1 (most urgent) to 9 (outbox.Priority).
	Priority outbox.Priority `json:"priority"`
}

func (k *kind) readKindFile(fsys fs.FS) error {
	rel := path.Join(string(k.name), KindFile)
	b, err := fs.ReadFile(fsys, rel)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var kj kindJSON
	if err := dec.Decode(&kj); err != nil {
		return jsonError(rel, b, err)
	}
	if kj.Priority != 0 {
		if err := kj.Priority.Validate(); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		k.priority = kj.Priority
	}
	for _, key := range kj.SecretKeys {
		if err := outbox.ValidateSecretKey(key); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if slices.Contains(k.secretKeys, key) {
			return fmt.Errorf("%s: secret key %q is listed twice", rel, key)
		}
		k.secretKeys = append(k.secretKeys, key)
	}
	return nil
}

// renderSample renders the kind against its sample.json, as a claimed row
// of the kind holding that payload would be: the boot-time proof that
// every template executes.
func (k *kind) renderSample(fsys fs.FS) error {
	rel := path.Join(string(k.name), SampleFile)
	b, err := fs.ReadFile(fsys, rel)
	if err != nil {
		return err
	}
	row, err := sampleRow(k.name, rel, b)
	if err != nil {
		return err
	}
	k.sample = b
	if _, err := k.render(row); err != nil {
		return fmt.Errorf("rendering %s: %w", rel, err)
	}
	return nil
}

// sampleRow is the row a payload would be once claimed and decoded: the
// payload validated as Enqueue validates it for the kind.
func sampleRow(kind outbox.Kind, name string, payload []byte) (*outbox.Row, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(payload, &probe); err != nil {
		return nil, jsonError(name, payload, err)
	}
	row := &outbox.Row{ID: "sample", Kind: kind, RawPayload: payload}
	if err := json.Unmarshal(payload, &row.Payload); err != nil {
		return nil, jsonError(name, payload, err)
	}
	if err := (outbox.Email{Kind: kind, Payload: row.Payload}).Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return row, nil
}

// jsonError names the file and the line of a JSON error.
func jsonError(name string, src []byte, err error) error {
	var offset int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	}
	if offset < 0 || offset > int64(len(src)) {
		return fmt.Errorf("%s: %w", name, err)
	}
	line := 1 + bytes.Count(src[:offset], []byte("\n"))
	return fmt.Errorf("%s:%d: %w", name, line, err)
}
