package smtp

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrPermanent marks a failure that retrying cannot fix: a 5xx reply or a
// message that can never be sent as built (header injection, bad address).
// Callers branch with errors.Is(err, ErrPermanent).
var ErrPermanent = errors.New("permanent")

// ErrSTARTTLSRefused is returned in starttls mode when the server does not
// advertise STARTTLS or the handshake fails. Nothing was sent. It is a
// configuration or network-integrity problem, so callers treat it as
// transient: fixing the relay resumes delivery without an operator. Its
// text names SMTP_TLS, the setting an operator changes when the relay is
// right and the mode is not (a local sink without TLS, a relay on 465).
var ErrSTARTTLSRefused = errors.New("STARTTLS required but not available (SMTP_TLS=starttls; " +
	"SMTP_TLS=tls for a relay on implicit TLS, SMTP_TLS=none for a local sink without TLS, outside production)")

// ErrPlaintextForbidden is returned when SMTP_TLS=none is used with
// APP_ENV=production. Transient for the outbox, like ErrSTARTTLSRefused.
var ErrPlaintextForbidden = errors.New("SMTP_TLS=none is forbidden when APP_ENV=production")

// ReplyError is an SMTP reply the server gave instead of accepting.
// A 5xx reply is permanent (errors.Is(err, ErrPermanent) is true);
// anything else is transient.
type ReplyError struct {
	Code         int    // e.g. 550
	EnhancedCode string // e.g. "5.1.1", empty when the server gave none
	Text         string
}

func (e *ReplyError) Error() string {
	if e.EnhancedCode != "" {
		return fmt.Sprintf("smtp reply %d %s: %s", e.Code, e.EnhancedCode, e.Text)
	}
	return fmt.Sprintf("smtp reply %d: %s", e.Code, e.Text)
}

// ErrBadMailbox is matched by a permanent reply whose enhanced status code
// (RFC 3463) says the recipient's mailbox, or its domain, will not take
// mail: sending to it again cannot succeed, so the outbox suppresses the
// address. It also matches ErrPermanent. A reply without an enhanced code
// is not classified: its text is free-form, and guessing from it would
// suppress addresses on a relay's policy or spam refusals.
var ErrBadMailbox = errors.New("recipient mailbox refused")

// badMailboxCodes are the enhanced codes, subject.detail of class 5, that
// name the destination mailbox or system. The sender-side codes of the same
// subject (X.1.7, X.1.8: our own address) and the quota and size codes
// (X.2.2, X.2.3: a full mailbox can empty) are left out.
var badMailboxCodes = map[string]bool{
	"1.1":  true, // bad destination mailbox address: the user does not exist
	"1.2":  true, // bad destination system address: the domain does not exist
	"1.3":  true, // bad destination mailbox address syntax
	"1.6":  true, // destination mailbox has moved, no forwarding address
	"1.10": true, // recipient address has null MX (RFC 7505): the domain takes no mail
	"2.1":  true, // mailbox disabled, not accepting messages
}

// BadMailbox reports whether the reply permanently refuses the recipient's
// mailbox (ErrBadMailbox).
func (e *ReplyError) BadMailbox() bool {
	class, rest, ok := strings.Cut(e.EnhancedCode, ".")
	return ok && class == "5" && e.Code >= 500 && e.Code <= 599 && badMailboxCodes[rest]
}

// Is makes errors.Is(err, ErrPermanent) true for 5xx replies only,
// errors.Is(err, ErrBadMailbox) for the permanent ones naming the mailbox,
// and errors.Is(err, ErrThrottled) for the transient ones that say the
// relay is limiting this client's rate.
func (e *ReplyError) Is(target error) bool {
	switch target {
	case ErrBadMailbox:
		return e.BadMailbox()
	case ErrThrottled:
		return e.Throttled()
	}
	return target == ErrPermanent && e.Code >= 500 && e.Code <= 599
}

// ErrThrottled is matched by a transient reply that says the relay is
// slowing this client down, not that anything is wrong with the message:
// 421 (the relay closes the session: too many connections or messages),
// 451 with an enhanced code of subject 7 (4.7.x: a policy, such as a rate
// limit) and Amazon SES's "454 Throttling failure: Maximum sending rate
// exceeded". Retrying it within seconds is what the relay asks for; a
// caller that counts retries toward giving up should not count these. A
// 451 of any other kind (4.3.0, a local error) is an ordinary transient
// failure.
var ErrThrottled = errors.New("relay throttling")

// Throttled reports whether the reply is a relay's throttling
// (ErrThrottled).
func (e *ReplyError) Throttled() bool {
	switch e.Code {
	case 421:
		return true
	case 451:
		return strings.HasPrefix(e.EnhancedCode, "4.7.")
	case 454:
		return strings.Contains(strings.ToLower(e.Text), "throttl")
	}
	return false
}

// ErrPossiblyDelivered is matched by a *PossiblyDeliveredError: the whole
// message, final dot included, was handed to the relay, and no reply came
// (a timeout, a lost connection, a cancelled context). The relay may have
// accepted it. It also matches ErrPermanent, so a caller that retries only
// transient failures does not send it again: a relay that never answers
// the final dot costs at most one duplicate (this send), not one per retry.
var ErrPossiblyDelivered = errors.New("possibly delivered")

// PossiblyDeliveredError is the failure to get a reply to the final dot.
// Its text says what an operator must do before requeueing.
type PossiblyDeliveredError struct {
	Waited time.Duration // from the final dot to the failure
	Err    error         // what ended the wait, with the relay and stage
}

func (e *PossiblyDeliveredError) Error() string {
	return fmt.Sprintf("possibly delivered: the relay did not answer the final dot within %s; "+
		"check the recipient before requeueing: %v", e.Waited, e.Err)
}

func (e *PossiblyDeliveredError) Unwrap() error { return e.Err }

// Is makes errors.Is true for ErrPossiblyDelivered and ErrPermanent.
func (e *PossiblyDeliveredError) Is(target error) bool {
	return target == ErrPossiblyDelivered || target == ErrPermanent
}
