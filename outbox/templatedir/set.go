package templatedir

import (
	"cmp"
	"context"
	"fmt"
	htmltemplate "html/template"
	"slices"
	texttemplate "text/template"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// The files a kind's folder may hold.
const (
	SubjectFile = "subject.tmpl"
	TextFile    = "text.tmpl"
	HTMLFile    = "html.tmpl"
	SampleFile  = "sample.json"
	KindFile    = "kind.json"
)

// SharedDir is the folder of templates every kind may call. Any folder
// whose name starts with "_" is not a kind; only this one is read.
const SharedDir = "_shared"

// Set is a loaded template directory: its kinds, parsed and proven
// against their samples. It is safe for concurrent use; nothing in it
// changes after Load.
type Set struct {
	dir      string // as given to Load, for messages
	kinds    map[outbox.Kind]*kind
	fallback outbox.Renderer
}

// kind is one folder.
type kind struct {
	name       outbox.Kind
	files      []string // paths relative to the directory, sorted
	secretKeys []string
	priority   outbox.Priority // kind.json's; zero: the kind's default
	sample     []byte

	subject                         *texttemplate.Template // each executes the template named by its file's path
	text                            *texttemplate.Template // nil without text.tmpl
	html                            *htmltemplate.Template // nil without html.tmpl
	subjectName, textName, htmlName string
}

// KindInfo describes one kind a worker can render, for `worker templates
// list`.
type KindInfo struct {
	Kind outbox.Kind
	// Source is "built-in", "directory", or "directory (replaces built-in)".
	Source string
	// Files are the kind's files, relative to the directory; none for a
	// built-in kind the directory does not replace.
	Files []string
	// SecretKeys are the extra secret payload keys the kind declares in
	// kind.json, beside outbox.SecretPayloadKeys.
	SecretKeys []string
	// Priority is the priority its kind.json declares (zero: none).
	Priority outbox.Priority
}

// Dir is the directory the set was loaded from.
func (s *Set) Dir() string { return s.dir }

// Kinds lists every kind this set renders: the built-in ones and the
// directory's, sorted by name.
func (s *Set) Kinds() []KindInfo {
	var out []KindInfo
	for _, b := range builtinKinds {
		if _, ok := s.kinds[b]; !ok {
			out = append(out, KindInfo{Kind: b, Source: "built-in"})
		}
	}
	for _, k := range s.kinds {
		info := KindInfo{Kind: k.name, Source: "directory", Files: slices.Clone(k.files), SecretKeys: slices.Clone(k.secretKeys), Priority: k.priority}
		if k.name.Builtin() {
			info.Source = "directory (replaces built-in)"
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b KindInfo) int { return cmp.Compare(a.Kind, b.Kind) })
	return out
}

// Has reports whether the directory holds kind k.
func (s *Set) Has(k outbox.Kind) bool {
	_, ok := s.kinds[k]
	return ok
}

// SecretPayloadKeys are the extra secret payload keys the directory's
// kinds declare (kind.json), sorted, each once: an outbox.SecretKeyer, so a
// Dispatcher rendering with the set seals and scrubs them as it does
// outbox.SecretPayloadKeys, in rows of every kind. Pass them to
// outbox.Enqueuer.SecretKeys to seal them at enqueue as well.
func (s *Set) SecretPayloadKeys() []string {
	var out []string
	for _, k := range s.kinds {
		out = append(out, k.secretKeys...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// KindPriorities are the priorities the directory's kinds declare
// (kind.json): an outbox.KindPrioritizer, so a Dispatcher rendering with
// the set records them and the rows of those kinds written without a
// priority take them.
func (s *Set) KindPriorities() map[outbox.Kind]outbox.Priority {
	out := map[outbox.Kind]outbox.Priority{}
	for _, k := range s.kinds {
		if k.priority != 0 {
			out[k.name] = k.priority
		}
	}
	return out
}

// Render renders a claimed row: from the directory's templates for its
// kinds, with outbox.DefaultRenderer for the built-in kinds it does not
// replace. Any other kind is a permanent error naming it: no worker
// configured like this one will ever render it, and a row of a kind that
// is merely new to this replica is the mixed-version case
// docs/TEMPLATES.md warns of.
func (s *Set) Render(ctx context.Context, row *outbox.Row) (smtp.Message, error) {
	if k, ok := s.kinds[row.Kind]; ok {
		msg, err := k.render(row)
		if err != nil {
			return msg, permanent(err)
		}
		return msg, nil
	}
	if row.Kind.Builtin() {
		return s.fallback.Render(ctx, row)
	}
	return smtp.Message{}, permanent(fmt.Errorf("kind %q is neither built in nor in the template directory %s (EMAIL_TEMPLATES_DIR)",
		row.Kind, s.dir))
}

var builtinKinds = []outbox.Kind{outbox.KindRaw, outbox.KindInvoice, outbox.KindPasswordReset, outbox.KindMemberInvite}

// permanentError makes a render failure match smtp.ErrPermanent: the row
// fails at once, its last_error naming the file and line. The same bytes
// render the same way on every attempt; a fixed template and a requeue are
// the way back.
type permanentError struct{ err error }

func (e permanentError) Error() string        { return e.err.Error() }
func (e permanentError) Unwrap() error        { return e.err }
func (e permanentError) Is(target error) bool { return target == smtp.ErrPermanent }

func permanent(err error) error { return permanentError{err} }
