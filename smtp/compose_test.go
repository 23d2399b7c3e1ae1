package smtp

import (
	"bytes"
	"mime"
	netmail "net/mail"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/mimetest"
)

// What the relay receives is a well-formed MIME message: text and HTML as
// alternatives, the PDF as application/pdf, and a Message-ID carrying the
// row id.
func TestSend_MessageShape(t *testing.T) {
	t.Parallel()
	sink := startSink(t, smtpsink.Options{})
	m := newMailer(t, sinkConfig(sink, ModeNone), nil)

	pdf := []byte("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n")
	msg := testMessage("0b7e9f2c-5d1a-4c39-9b1e-2f6a8d4c7e10")
	msg.Subject = "Rechnung Nr. 42 – fällig"
	msg.PDF, msg.PDFName = pdf, "INV-42.pdf"
	if err := m.Send(testCtx(t), msg); err != nil {
		t.Fatal(err)
	}
	got := sink.Messages()
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	r := got[0]
	if r.From != "billing@example.com" || len(r.To) != 1 || r.To[0] != "ada@example.org" {
		t.Fatalf("envelope %q → %q", r.From, r.To)
	}
	if r.MessageID != "<"+msg.RowID+"@example.com>" || r.RowID != msg.RowID {
		t.Fatalf("Message-ID %q (row %q); want <%s@example.com>", r.MessageID, r.RowID, msg.RowID)
	}
	if r.Subject != msg.Subject {
		t.Fatalf("Subject %q; want %q", r.Subject, msg.Subject)
	}

	parsed, err := netmail.ReadMessage(bytes.NewReader(r.Data))
	if err != nil {
		t.Fatal(err)
	}
	if from := parsed.Header.Get("From"); !strings.Contains(from, "billing@example.com") {
		t.Fatalf("From header %q", from)
	}
	if got := parsed.Header.Get(RowHeader); got != msg.RowID {
		t.Fatalf("%s header %q; want the row id %s (the correlation handle when a provider rewrites the Message-ID)", RowHeader, got, msg.RowID)
	}
	if parsed.Header.Get("Date") == "" || parsed.Header.Get("Mime-Version") == "" {
		t.Fatalf("missing Date or MIME-Version: %v", parsed.Header)
	}

	parts := map[string][]byte{} // content type → decoded body, flattened
	mimetest.Collect(t, parsed.Header.Get("Content-Type"), parsed.Body, parts)
	if got := string(parts["text/plain"]); !strings.Contains(got, "your invoice is attached") {
		t.Errorf("text/plain part %q", got)
	}
	if got := string(parts["text/html"]); !strings.Contains(got, "<p>Hello Ada,</p>") {
		t.Errorf("text/html part %q", got)
	}
	if !bytes.Equal(parts["application/pdf"], pdf) {
		t.Errorf("application/pdf part does not round-trip: %q", parts["application/pdf"])
	}
	if _, ok := parts["multipart/alternative"]; !ok {
		t.Errorf("text and HTML are not a multipart/alternative; parts: %v", keys(parts))
	}
}

func TestCompose_SinglePart(t *testing.T) {
	t.Parallel()
	m := newMailer(t, Config{From: "postbox@example.com"}, nil)
	for _, tc := range []struct {
		name, text, html, want string
	}{{"text only", "hi", "", "text/plain"}, {"HTML only", "", "<b>hi</b>", "text/html"}} {
		l, err := m.compose(Message{RowID: "r1", To: "a@example.org", Subject: "s", Text: tc.text, HTML: tc.html})
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := netmail.ReadMessage(bytes.NewReader(l.data))
		if err != nil {
			t.Fatal(err)
		}
		if mt, _, _ := mime.ParseMediaType(parsed.Header.Get("Content-Type")); mt != tc.want {
			t.Errorf("%s: Content-Type %s, want %s", tc.name, mt, tc.want)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
