package smtp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	netmail "net/mail"
	"strings"

	mail "github.com/wneessen/go-mail"
)

const defaultPDFName = "attachment.pdf"

// RowHeader carries Message.RowID in every message sent for a row, beside
// the Message-ID's left half, so a delivery event can name the row even
// when the provider replaced the Message-ID.
const RowHeader = "X-Postbox-Row"

// letter is a message ready for the wire: envelope addresses and the
// RFC 5322 bytes.
type letter struct {
	from, to string // bare addresses for MAIL FROM and RCPT TO
	rowID    string
	data     []byte
}

// compose validates msg and renders it. Every error it returns is
// permanent: the same message can never be sent, so retrying is pointless.
// It runs before any connection is touched, so a rejected message leaves no
// trace on the relay.
func (m *Mailer) compose(msg Message) (letter, error) {
	// Header injection: a CR or LF in a header value would let whoever
	// controls it add headers (Bcc:) or a body. go-mail would encode it
	// away, but a message that carries one is malformed upstream and must
	// surface, not be silently repaired.
	for _, f := range []struct{ name, value string }{
		{"To", msg.To}, {"Subject", msg.Subject}, {"PDFName", msg.PDFName}, {"RowID", msg.RowID},
	} {
		if strings.ContainsAny(f.value, "\r\n") {
			return letter{}, invalid(msg.RowID, "%s contains CR or LF", f.name)
		}
	}
	to, err := netmail.ParseAddress(msg.To)
	if err != nil {
		return letter{}, invalid(msg.RowID, "To %q: %v", msg.To, err)
	}
	if msg.Text == "" && msg.HTML == "" {
		return letter{}, invalid(msg.RowID, "neither Text nor HTML is set")
	}
	rowID := msg.RowID
	if rowID == "" {
		rowID = randomID()
	} else if !isAtext(rowID) {
		// The id becomes the left half of the Message-ID; anything outside
		// RFC 5322 atext would break the header or the correlation.
		return letter{}, invalid(msg.RowID, "RowID %q: only letters, digits and !#$%%&'*+-/=?^_`{|}~. are allowed", msg.RowID)
	}

	g := mail.NewMsg(mail.WithNoDefaultUserAgent())
	g.FromMailAddress(m.from)
	g.ToMailAddress(to)
	g.Subject(msg.Subject)
	g.SetMessageIDWithValue(rowID + "@" + m.msgIDDomain)
	if msg.RowID != "" {
		// Providers rewrite the Message-ID (SES does) but pass custom
		// headers through to their event payloads: the second handle on
		// the row for bounce and complaint correlation.
		g.SetGenHeader(RowHeader, msg.RowID)
	}
	g.SetDate()
	switch {
	case msg.Text != "" && msg.HTML != "":
		g.SetBodyString(mail.TypeTextPlain, msg.Text)
		g.AddAlternativeString(mail.TypeTextHTML, msg.HTML)
	case msg.Text != "":
		g.SetBodyString(mail.TypeTextPlain, msg.Text)
	default:
		g.SetBodyString(mail.TypeTextHTML, msg.HTML)
	}
	if len(msg.PDF) > 0 {
		name := msg.PDFName
		if name == "" {
			name = defaultPDFName
		}
		g.AttachReadSeeker(name, bytes.NewReader(msg.PDF), mail.WithFileContentType("application/pdf"))
	}

	var buf bytes.Buffer
	buf.Grow(2048 + len(msg.Text) + len(msg.HTML) + len(msg.PDF)*4/3)
	if _, err := g.WriteTo(&buf); err != nil {
		return letter{}, invalid(msg.RowID, "render: %v", err)
	}
	return letter{from: m.from.Address, to: to.Address, rowID: rowID, data: buf.Bytes()}, nil
}

func invalid(rowID, format string, args ...any) error {
	return fmt.Errorf("smtp: message %q: %s: %w", rowID, fmt.Sprintf(format, args...), ErrPermanent)
}

func isAtext(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-/=?^_`{|}~.", r):
		default:
			return false
		}
	}
	return s != ""
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
