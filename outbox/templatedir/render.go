package templatedir

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// render executes the kind's templates on the row's data.
func (k *kind) render(row *outbox.Row) (smtp.Message, error) {
	p := &row.Payload
	msg := smtp.Message{RowID: row.ID, To: p.To, PDF: p.PDF, PDFName: p.PDFName}
	data, err := templateData(row)
	if err != nil {
		return msg, err
	}
	var subject, text, html bytes.Buffer
	if err := k.subject.Execute(&subject, data); err != nil {
		return msg, err
	}
	// A subject template ends in a newline more often than not; a line
	// break inside it is still refused, as header injection.
	msg.Subject = strings.TrimSpace(subject.String())
	if msg.Subject == "" {
		return msg, fmt.Errorf("%s: rendered an empty subject", k.subjectName)
	}
	if strings.ContainsAny(msg.Subject, "\r\n") {
		return msg, fmt.Errorf("%s: rendered a subject with a line break (header injection)", k.subjectName)
	}
	if k.text != nil {
		if err := k.text.Execute(&text, data); err != nil {
			return msg, err
		}
		msg.Text = text.String()
	}
	if k.html != nil {
		if err := k.html.Execute(&html, data); err != nil {
			return msg, err
		}
		msg.HTML = html.String()
	}
	if strings.TrimSpace(msg.Text) == "" && strings.TrimSpace(msg.HTML) == "" {
		return msg, fmt.Errorf("%s/: rendered neither a text nor an HTML body", k.name)
	}
	if len(msg.PDF) > 0 && msg.PDFName == "" {
		msg.PDFName = "attachment.pdf"
		if row.Kind == outbox.KindInvoice {
			msg.PDFName = "invoice-" + fileSafe(p.InvoiceNumber) + ".pdf"
		}
	}
	return msg, nil
}

// payloadFields are outbox.Payload's fields by JSON name, except pdf (the
// attachment, not text to render) and Data.
var payloadFields = func() map[string]int {
	fields := map[string]int{}
	t := reflect.TypeFor[outbox.Payload]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && name != "pdf" {
			fields[name] = i
		}
	}
	return fields
}()

// templateData is what a directory kind's templates see: the payload as a
// map of its top-level keys, as in the SQL row. Every field of
// outbox.Payload is present (its zero value when unset) and comes from
// the decoded Payload, so sealed secret fields are opened; pdf is left out
// (it is the attachment). Other keys are the payload's own JSON values
// (numbers keep the digits written), with the values the dispatcher opened
// into Payload.Data in place of their envelopes. A key that is still a
// sealed envelope is an error: the kind did not declare it secret on this
// worker, so nothing opened it.
func templateData(row *outbox.Row) (map[string]any, error) {
	data := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(row.RawPayload))
	dec.UseNumber()
	if err := dec.Decode(&data); err != nil {
		return nil, fmt.Errorf("decode payload: %w", err)
	}
	delete(data, "pdf")
	v := reflect.ValueOf(row.Payload)
	for name, i := range payloadFields {
		data[name] = v.Field(i).Interface()
	}
	for key, value := range row.Payload.Data {
		data[key] = value
	}
	for key, value := range data {
		if m, ok := value.(map[string]any); ok && m["enc"] != nil && m["ct"] != nil {
			return nil, fmt.Errorf("payload.%s is sealed and was not opened: a malformed envelope, or a worker without keys", key)
		}
	}
	return data, nil
}

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
