package smtp

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"
	"testing"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

func TestReplyClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		reply     *gosmtp.SMTPError
		permanent bool
		enhanced  string
	}{
		{"550 5.1.1 unknown mailbox", &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"}, true, "5.1.1"},
		{"451 4.3.0 try later", &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "try again later"}, false, "4.3.0"},
		{"554 5.7.1 rejected", &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 7, 1}, Message: "spam"}, true, "5.7.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sink := startSink(t, smtpsink.Options{Fault: func(e smtpsink.Envelope) error {
				if strings.Contains(string(e.Data), "reject-me") {
					return tc.reply
				}
				return nil
			}})
			m := newMailer(t, sinkConfig(sink, ModeNone), nil)
			err := m.Send(testCtx(t), testMessage("reject-me"))
			if err == nil {
				t.Fatal("Send succeeded; want the relay's rejection")
			}
			if got := errors.Is(err, ErrPermanent); got != tc.permanent {
				t.Fatalf("errors.Is(err, ErrPermanent) = %v, want %v (err: %v)", got, tc.permanent, err)
			}
			var re *ReplyError
			if !errors.As(err, &re) {
				t.Fatalf("err %v is not a *ReplyError", err)
			}
			if re.Code != tc.reply.Code || re.EnhancedCode != tc.enhanced || re.Text != tc.reply.Message {
				t.Fatalf("ReplyError = %+v; want code %d, enhanced %s, text %q", re, tc.reply.Code, tc.enhanced, tc.reply.Message)
			}

			// The session survived the rejection: the next message reuses it.
			if err := m.Send(testCtx(t), testMessage("fine")); err != nil {
				t.Fatal(err)
			}
			if sink.Connections() != 1 {
				t.Fatalf("%d connections; a rejected message should not cost the session", sink.Connections())
			}
		})
	}
}

// A CR or LF in any header value is header injection: refused as permanent
// before any connection is made. Malformed messages likewise.
func TestSend_HeaderInjection(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*Message)
	}{
		{"CRLF in Subject", func(m *Message) { m.Subject = "Invoice\r\nBcc: victim@example.net" }},
		{"LF in Subject", func(m *Message) { m.Subject = "Invoice\nX-Evil: 1" }},
		{"CRLF in To", func(m *Message) { m.To = "ada@example.org\r\nBcc: victim@example.net" }},
		{"CR in PDFName", func(m *Message) { m.PDF, m.PDFName = []byte("%PDF-1.4"), "a.pdf\rContent-Type: text/html" }},
		{"LF in RowID", func(m *Message) { m.RowID = "row\nX-Evil: 1" }},
		{"unparsable To", func(m *Message) { m.To = "not an address" }},
		{"no body", func(m *Message) { m.Text, m.HTML = "", "" }},
		{"RowID outside atext", func(m *Message) { m.RowID = "row>1@evil" }},
	}
	sink := startSink(t, smtpsink.Options{})
	m := newMailer(t, sinkConfig(sink, ModeNone), nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := testMessage("row-1")
			tc.edit(&msg)
			err := m.Send(testCtx(t), msg)
			if !errors.Is(err, ErrPermanent) {
				t.Fatalf("err = %v; want ErrPermanent", err)
			}
		})
	}
	if sink.Connections() != 0 || sink.SawMailFrom() != 0 {
		t.Fatalf("the relay saw %d connections and %d MAIL FROM; want none", sink.Connections(), sink.SawMailFrom())
	}
}

func TestToReplyError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   textproto.Error
		want ReplyError
	}{
		{textproto.Error{Code: 550, Msg: "5.1.1 no such user"}, ReplyError{550, "5.1.1", "no such user"}},
		{textproto.Error{Code: 451, Msg: "try later"}, ReplyError{451, "", "try later"}},
		{textproto.Error{Code: 552, Msg: "5.3.4 too big\n5.3.4 really"}, ReplyError{552, "5.3.4", "too big\nreally"}},
		{textproto.Error{Code: 550, Msg: "1.2.3 not an enhanced code"}, ReplyError{550, "", "1.2.3 not an enhanced code"}},
	}
	for _, tc := range cases {
		if got := toReplyError(&tc.in); *got != tc.want {
			t.Errorf("toReplyError(%q) = %+v, want %+v", tc.in.Msg, *got, tc.want)
		}
	}
	// Only 5xx is permanent; code 0 (no reply at all) never is.
	for code, permanent := range map[int]bool{0: false, 250: false, 421: false, 451: false, 499: false, 500: true, 550: true, 599: true, 600: false} {
		if got := errors.Is(&ReplyError{Code: code}, ErrPermanent); got != permanent {
			t.Errorf("code %d: permanent = %v, want %v", code, got, permanent)
		}
	}
}

// TestReplyError_BadMailbox: the permanent replies whose enhanced code
// names the recipient's mailbox or domain (RFC 3463 X.1.1, X.1.2, X.1.3,
// X.1.6, X.1.10 of RFC 7505, X.2.1) match ErrBadMailbox, at RCPT TO as
// relays refuse them, through the real Mailer; transient, sender-side,
// policy, quota and code-less replies do not.
func TestReplyError_BadMailbox(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code     int
		enhanced gosmtp.EnhancedCode
		bad      bool
	}{
		{550, gosmtp.EnhancedCode{5, 1, 1}, true},
		{550, gosmtp.EnhancedCode{5, 1, 2}, true},
		{553, gosmtp.EnhancedCode{5, 1, 3}, true},
		{551, gosmtp.EnhancedCode{5, 1, 6}, true},
		{556, gosmtp.EnhancedCode{5, 1, 10}, true},
		{550, gosmtp.EnhancedCode{5, 2, 1}, true},
		{450, gosmtp.EnhancedCode{4, 1, 1}, false},  // transient: the relay's directory is down
		{452, gosmtp.EnhancedCode{4, 2, 2}, false},  // mailbox full, for now
		{552, gosmtp.EnhancedCode{5, 2, 2}, false},  // mailbox full: it can empty
		{553, gosmtp.EnhancedCode{5, 1, 7}, false},  // our sender address
		{554, gosmtp.EnhancedCode{5, 7, 1}, false},  // policy or spam refusal
		{550, gosmtp.EnhancedCode{5, 1, 11}, false}, // not a code RFC 3463 or 7505 define
		{550, gosmtp.NoEnhancedCode, false},         // free text only: not classified
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%d_%v", tc.code, tc.enhanced)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sink := startSink(t, smtpsink.Options{RejectRcpt: func(string) error {
				return &gosmtp.SMTPError{Code: tc.code, EnhancedCode: tc.enhanced, Message: "refused"}
			}})
			m := newMailer(t, sinkConfig(sink, ModeNone), nil)
			err := m.Send(testCtx(t), testMessage("row-1"))
			if err == nil {
				t.Fatal("Send succeeded; want the refusal")
			}
			if got := errors.Is(err, ErrBadMailbox); got != tc.bad {
				t.Fatalf("errors.Is(%v, ErrBadMailbox) = %v; want %v", err, got, tc.bad)
			}
			if tc.bad && !errors.Is(err, ErrPermanent) {
				t.Fatalf("a bad mailbox is not permanent: %v", err)
			}
		})
	}
}
