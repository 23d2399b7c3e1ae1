package smtp

import (
	"errors"
	"net"
	"strings"
	"testing"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

// A relay's throttling replies (421, 451 4.7.x, SES's 454 Throttling)
// match ErrThrottled, and stay transient; other 4xx replies and 5xx do
// not match it. Each reply comes from a real relay session.
func TestReplyClasses_Throttling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		reply     *gosmtp.SMTPError
		throttled bool
	}{
		{"421 4.7.0 too many messages", &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 7, 0}, Message: "Too many messages, slow down"}, true},
		{"451 4.7.1 rate limited", &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 7, 1}, Message: "Rate limit exceeded"}, true},
		{"454 4.7.0 SES throttling", &gosmtp.SMTPError{Code: 454, EnhancedCode: gosmtp.EnhancedCode{4, 7, 0}, Message: "Throttling failure: Maximum sending rate exceeded."}, true},
		{"454 SES throttling without an enhanced code", &gosmtp.SMTPError{Code: 454, EnhancedCode: gosmtp.NoEnhancedCode, Message: "Throttling failure: Daily message quota exceeded."}, true},
		{"451 4.3.0 local error", &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "Local error in processing"}, false},
		{"451 without an enhanced code", &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.NoEnhancedCode, Message: "try again later"}, false},
		{"454 4.7.0 another temporary failure", &gosmtp.SMTPError{Code: 454, EnhancedCode: gosmtp.EnhancedCode{4, 7, 0}, Message: "Temporary authentication failure"}, false},
		{"450 4.2.1 mailbox busy", &gosmtp.SMTPError{Code: 450, EnhancedCode: gosmtp.EnhancedCode{4, 2, 1}, Message: "Mailbox busy"}, false},
		{"554 5.7.1 rejected", &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 7, 1}, Message: "rate of spam too high"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sink := startSink(t, smtpsink.Options{Fault: func(e smtpsink.Envelope) error {
				if strings.Contains(string(e.Data), "throttle-me") {
					return tc.reply
				}
				return nil
			}})
			m := newMailer(t, sinkConfig(sink, ModeNone), nil)
			err := m.Send(testCtx(t), testMessage("throttle-me"))
			if err == nil {
				t.Fatal("Send succeeded; want the relay's reply")
			}
			if got := errors.Is(err, ErrThrottled); got != tc.throttled {
				t.Fatalf("errors.Is(err, ErrThrottled) = %v, want %v (err: %v)", got, tc.throttled, err)
			}
			if tc.throttled && errors.Is(err, ErrPermanent) {
				t.Fatalf("a throttling reply is permanent: %v", err)
			}
		})
	}
}

// A relay that greets a new connection with 421 — too many connections —
// is throttling as much as one that answers MAIL FROM so; any other
// refusal of the greeting is not.
func TestGreeting_421IsThrottling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		greeting  string
		throttled bool
	}{
		{"421 4.7.0 Too many connections, try again later", true},
		{"554 5.3.2 No service here", false},
	} {
		t.Run(tc.greeting, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write([]byte(tc.greeting + "\r\n"))
					c.Close()
				}
			}()
			addr := ln.Addr().(*net.TCPAddr)
			m := newMailer(t, Config{Host: "127.0.0.1", Port: addr.Port, Mode: ModeNone}, nil)
			err = m.Send(testCtx(t), testMessage("greeted"))
			if err == nil {
				t.Fatal("Send succeeded; want the greeting's refusal")
			}
			if got := errors.Is(err, ErrThrottled); got != tc.throttled {
				t.Fatalf("errors.Is(err, ErrThrottled) = %v, want %v (err: %v)", got, tc.throttled, err)
			}
			if errors.Is(err, ErrPermanent) {
				t.Fatalf("a refused greeting is permanent: %v", err)
			}
		})
	}
}
