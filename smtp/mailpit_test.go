package smtp

import (
	"errors"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/mailpittest"
)

// Mailpit is a real SMTP server written by someone else: it catches what an
// in-process go-smtp sink, written against the same assumptions as the
// client, could not. CI runs these tests (CI non-empty makes a missing
// binary fatal); locally they skip with install instructions.
func TestMailpit(t *testing.T) {
	t.Parallel()
	bin := mailpittest.Binary(t)
	_, files := newBundle(t)

	t.Run("require STARTTLS: delivered with PDF", func(t *testing.T) {
		t.Parallel()
		mp := mailpittest.Start(t, bin, "--smtp-require-starttls", "--smtp-tls-cert", files.Cert, "--smtp-tls-key", files.Key,
			"--smtp-auth-accept-any")
		cfg := Config{Host: "localhost", Port: mp.SMTPPort, Mode: ModeSTARTTLS, CAFile: files.CA,
			Username: "postbox", Password: "pw", From: "Billing <billing@example.com>"}
		m := newMailer(t, cfg, nil)

		msg := testMessage("5f0c2a9e-8d7b-4e61-a3c4-1b2d3e4f5a6b")
		msg.PDF, msg.PDFName = []byte("%PDF-1.4\n% postbox test\n%%EOF\n"), "INV-42.pdf"
		if err := m.Send(testCtx(t), msg); err != nil {
			t.Fatal(err)
		}

		var list struct {
			Total    int
			Messages []struct {
				ID, MessageID, Subject, Username string
				Attachments                      int
			}
		}
		mp.WaitForMessages(t, 1, &list)
		got := list.Messages[0]
		if got.MessageID != msg.RowID+"@example.com" || got.Subject != msg.Subject || got.Attachments != 1 {
			t.Fatalf("Mailpit has %+v; want Message-ID %s@example.com, subject %q, one attachment", got, msg.RowID, msg.Subject)
		}
		if got.Username != "postbox" {
			t.Errorf("Mailpit saw AUTH user %q; want postbox", got.Username)
		}

		var full struct {
			MessageID   string
			Text        string
			HTML        string
			Attachments []struct{ PartID, FileName, ContentType string }
		}
		mp.GetJSON(t, "/api/v1/message/"+got.ID, &full)
		if len(full.Attachments) != 1 {
			t.Fatalf("attachments %+v", full.Attachments)
		}
		a := full.Attachments[0]
		if a.ContentType != "application/pdf" || a.FileName != msg.PDFName {
			t.Fatalf("attachment %+v; want application/pdf named %s", a, msg.PDFName)
		}
		if !strings.Contains(full.Text, "your invoice is attached") || !strings.Contains(full.HTML, "<p>Hello Ada,</p>") {
			t.Errorf("text %q / html %q", full.Text, full.HTML)
		}
		if body := mp.Get(t, "/api/v1/message/"+got.ID+"/part/"+a.PartID); string(body) != string(msg.PDF) {
			t.Errorf("attachment bytes %q; want %q", body, msg.PDF)
		}
	})

	t.Run("no TLS offered: starttls refuses", func(t *testing.T) {
		t.Parallel()
		mp := mailpittest.Start(t, bin)
		m := newMailer(t, Config{Host: "127.0.0.1", Port: mp.SMTPPort, Mode: ModeSTARTTLS, CAFile: files.CA}, nil)
		err := m.Send(testCtx(t), testMessage("row-1"))
		if !errors.Is(err, ErrSTARTTLSRefused) {
			t.Fatalf("err = %v; want ErrSTARTTLSRefused", err)
		}
		var list struct{ Total int }
		mp.GetJSON(t, "/api/v1/messages", &list)
		if list.Total != 0 {
			t.Fatalf("Mailpit stored %d messages; want none", list.Total)
		}
	})
}
