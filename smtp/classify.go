package smtp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"os"
	"strings"
	"syscall"
	"time"
)

// stage is how far a session got. It decides what a reply means: a reply to
// the greeting, EHLO, STARTTLS or AUTH is about the connection and the
// configuration, so even a 5xx there is transient (fixing the relay or the
// credentials resumes delivery); a reply to MAIL, RCPT or DATA is about this
// message, and there a 5xx is permanent.
type stage int

const (
	stageDial stage = iota
	stageGreeting
	stageHello
	stageSTARTTLS
	stageAuth
	stageMail
	stageRcpt
	stageData    // the DATA command: from here on the message may be handed over
	stageContent // the message itself, up to and including its final dot
	stageReply   // the reply to the final dot: the relay holds the whole message
)

var stageNames = [...]string{"dial", "greeting", "EHLO", "STARTTLS", "AUTH", "MAIL FROM", "RCPT TO", "DATA", "message", "reply to the final dot"}

func (s stage) String() string { return stageNames[s] }

// transactional reports whether a reply at this stage is about the message.
func (s stage) transactional() bool { return s >= stageMail }

// fail shapes every error Send returns: it names the relay and mode (so the
// log line diagnoses itself), turns a reply to the message into a
// *ReplyError, and puts the caller's context error in the chain when the
// context is what ended the exchange.
func (m *Mailer) fail(ctx context.Context, st stage, err error) error {
	var te *textproto.Error
	switch {
	case st.transactional() && errors.As(err, &te):
		err = toReplyError(te)
	case errors.As(err, &te) && te.Code == 421:
		// A 421 to the greeting or EHLO — too many connections — is the
		// relay's throttling as much as one to MAIL FROM.
		err = fmt.Errorf("%w: %w", ErrThrottled, err)
	}
	cause := context.Cause(ctx)
	if d, ok := ctx.Deadline(); ok && cause == nil && !time.Now().Before(d) {
		// The socket deadline we set from ctx can fire a moment before
		// ctx's own timer does; the caller's deadline is still the cause.
		cause = context.DeadlineExceeded
	}
	if cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	if st == stageDial {
		// No relay answered where the settings point: name them, since
		// a newcomer's first send meets this with none of them set.
		return fmt.Errorf("smtp %s mode=%s: %s: %w (the relay is SMTP_HOST:SMTP_PORT, spoken to as SMTP_TLS says)", m.addr, m.cfg.Mode, st, err)
	}
	return fmt.Errorf("smtp %s mode=%s: %s: %w", m.addr, m.cfg.Mode, st, err)
}

// toReplyError keeps the code, the enhanced code (RFC 3463) and the text.
// The class comes from the code alone: go-mail's IsTemp reads the text, which
// misclassifies timeouts (code 0) and replies without an enhanced code.
func toReplyError(te *textproto.Error) *ReplyError {
	re := &ReplyError{Code: te.Code, Text: te.Msg}
	if code, rest, ok := strings.Cut(te.Msg, " "); ok && isEnhancedCode(code) {
		re.EnhancedCode = code
		// Multi-line replies repeat the enhanced code on every line.
		re.Text = strings.ReplaceAll(rest, "\n"+code+" ", "\n")
	}
	return re
}

// isEnhancedCode matches class.subject.detail, e.g. 5.1.1.
func isEnhancedCode(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || len(parts[0]) != 1 || strings.IndexByte("245", parts[0][0]) < 0 {
		return false
	}
	for _, p := range parts[1:] {
		if len(p) < 1 || len(p) > 3 {
			return false
		}
		for _, r := range p {
			if r < '0' || r > '9' {
				return false
			}
		}
	}
	return true
}

// stale reports whether an error on a reused connection means the relay had
// already hung up while it sat idle: a reset, an EOF, or the 421 a relay
// sends when it times out an idle client. Deadline expiry is not staleness:
// a fresh connection would have no more time left.
func stale(err error) bool {
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code == 421
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}
