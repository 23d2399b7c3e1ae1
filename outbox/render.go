package outbox

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	htmltemplate "html/template"
	"strings"
	texttemplate "text/template"

	"github.com/postbox/postbox/smtp"
)

// Renderer turns a claimed row into the message to send. It runs under
// leases.BrandingBudget. The dispatcher sets the message's RowID and To
// from the row afterwards: the recipient is always the payload's "to",
// the address the suppression check looked at.
//
// An error that matches smtp.ErrPermanent fails the row at once; ErrSkip
// marks it skipped; any other error is transient and retried. The
// dispatcher records it after "render: ", so it need not say so itself.
type Renderer interface {
	Render(ctx context.Context, row *Row) (smtp.Message, error)
}

// RendererFunc adapts a function to Renderer.
type RendererFunc func(ctx context.Context, row *Row) (smtp.Message, error)

// Render calls f.
func (f RendererFunc) Render(ctx context.Context, row *Row) (smtp.Message, error) { return f(ctx, row) }

// DefaultRenderer sends a KindRaw row's own subject, text, HTML and PDF,
// and renders the built-in templates for KindInvoice (with the PDF
// attached), KindPasswordReset and KindMemberInvite. Custom renderers can
// wrap it and handle only the kinds they brand differently.
func DefaultRenderer() Renderer { return builtinRenderer{} }

type builtinRenderer struct{}

func (builtinRenderer) Render(_ context.Context, row *Row) (smtp.Message, error) {
	p := &row.Payload
	msg := smtp.Message{RowID: row.ID, To: p.To, Subject: p.Subject, PDF: p.PDF, PDFName: p.PDFName}
	if row.Kind == KindRaw {
		msg.Text, msg.HTML = p.Text, p.HTML
		if len(msg.PDF) > 0 && msg.PDFName == "" {
			msg.PDFName = "attachment.pdf"
		}
		return msg, nil
	}
	t, ok := builtinTemplates[row.Kind]
	if !ok {
		return msg, permanent(fmt.Errorf("kind %q is not built in, and this worker has no template directory holding it", row.Kind))
	}
	var text, html bytes.Buffer
	if err := t.text.Execute(&text, p); err != nil {
		return msg, permanent(fmt.Errorf("%s text: %w", row.Kind, err))
	}
	if err := t.html.Execute(&html, p); err != nil {
		return msg, permanent(fmt.Errorf("%s html: %w", row.Kind, err))
	}
	msg.Text, msg.HTML = text.String(), html.String()
	if row.Kind == KindInvoice && len(msg.PDF) > 0 && msg.PDFName == "" {
		msg.PDFName = "invoice-" + fileSafe(p.InvoiceNumber) + ".pdf"
	}
	if row.Kind != KindInvoice {
		// Only an invoice carries an attachment in the built-in templates.
		msg.PDF, msg.PDFName = nil, ""
	}
	return msg, nil
}

//go:embed templates/*.tmpl
var templateFiles embed.FS

type builtinTemplate struct {
	text *texttemplate.Template
	html *htmltemplate.Template
}

// builtinTemplates are parsed once at start-up; a template that does not
// parse is a programming error and panics in every test.
var builtinTemplates = func() map[Kind]builtinTemplate {
	m := map[Kind]builtinTemplate{}
	for _, k := range []Kind{KindInvoice, KindPasswordReset, KindMemberInvite} {
		name := string(k)
		m[k] = builtinTemplate{
			text: texttemplate.Must(texttemplate.New(name+".txt.tmpl").Option("missingkey=error").
				ParseFS(templateFiles, "templates/"+name+".txt.tmpl")),
			html: htmltemplate.Must(htmltemplate.New(name+".html.tmpl").Option("missingkey=error").
				ParseFS(templateFiles, "templates/"+name+".html.tmpl")),
		}
	}
	return m
}()

// fileSafe keeps the characters a file name can carry anywhere.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}
