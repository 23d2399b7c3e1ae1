package smtp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail/smtp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine/tracing"
)

// deliver is the one path every message takes, in every mode (see
// docs/design/outbox-transport.md, One SMTP path). In order: the production
// policy, the message checks, a connection (reused or dialed), the relay's
// greeting, TLS, AUTH, and the transaction. Nothing reaches the relay before
// the checks pass, and nothing after EHLO is sent until the mode's TLS
// requirement is met.
func (m *Mailer) deliver(ctx context.Context, msg Message) error {
	if m.cfg.Mode == ModeNone && m.production {
		m.log.Error("smtp: refusing to send in plaintext in production; set SMTP_TLS=starttls or tls",
			"SMTP_TLS", m.cfg.Mode, "APP_ENV", m.cfg.AppEnv, "host", m.cfg.Host, "port", m.cfg.Port, "row_id", msg.RowID)
		return fmt.Errorf("smtp %s mode=%s: %w (APP_ENV=%s)", m.addr, m.cfg.Mode, ErrPlaintextForbidden, m.cfg.AppEnv)
	}
	l, err := m.compose(msg)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return m.fail(ctx, stageDial, err)
	}

	c := m.pool.get()
	reused := c != nil
	for {
		if c == nil {
			dctx, span := tracing.Step(ctx, tracing.SpanSMTPDial)
			if span.IsRecording() {
				span.SetAttributes(tracing.ServerAddr.String(m.cfg.Host))
			}
			c, err = m.dial(dctx)
			endSpan(span, err)
			if err != nil {
				return err
			}
		}
		ectx, span := tracing.Step(ctx, tracing.SpanSMTPExchange)
		if span.IsRecording() {
			span.SetAttributes(tracing.SMTPReused.Bool(reused))
		}
		st, err := m.exchange(ectx, c, l)
		endSpan(span, err)
		if err == nil {
			return nil
		}
		// A pooled connection the relay closed while it sat idle fails on
		// its first command. Before DATA nothing was handed over, so one
		// retry on a fresh connection is safe; from DATA on the relay may
		// have the message, and a retry could deliver it twice.
		if reused && st < stageData && stale(err) && ctx.Err() == nil {
			m.log.Debug("smtp: pooled connection was closed by the relay; redialing", "host", m.cfg.Host, "port", m.cfg.Port, "err", err)
			m.pool.flush()
			c, reused = nil, false
			continue
		}
		err = m.fail(ctx, st, err)
		var nr *noReplyError
		if errors.As(err, &nr) {
			m.log.Warn("smtp: the relay did not answer the final dot; the message is possibly delivered and is not retried",
				"host", m.cfg.Host, "port", m.cfg.Port, "row_id", l.rowID, "waited", nr.waited, "err", nr.err)
			return &PossiblyDeliveredError{Waited: nr.waited, Err: err}
		}
		if errors.Is(err, ErrSTARTTLSRefused) {
			m.log.Error("smtp: STARTTLS required but refused; nothing was sent",
				"host", m.cfg.Host, "port", m.cfg.Port, "mode", m.cfg.Mode, "row_id", l.rowID, "err", err)
		}
		return err
	}
}

// endSpan ends an SMTP step's span with the relay's reply code, if it
// refused, and an error status; the reply's text can quote the recipient,
// so it stays out.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		// The exchange returns the protocol's error; fail makes the
		// ReplyError of it later.
		if re, ok := errors.AsType[*ReplyError](err); ok {
			span.SetAttributes(tracing.SMTPReply.Int(re.Code))
		} else if te, ok := errors.AsType[*textproto.Error](err); ok {
			span.SetAttributes(tracing.SMTPReply.Int(te.Code))
		}
		span.SetStatus(codes.Error, "smtp step failed")
	}
	span.End()
}

// dial opens the TCP connection, and for ModeTLS completes the handshake,
// within DialBudget (and the caller's context).
func (m *Mailer) dial(ctx context.Context) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, m.dialBudget)
	defer cancel()
	raw, err := m.dialer.DialContext(dctx, "tcp", m.addr)
	if err != nil {
		return nil, m.fail(ctx, stageDial, err)
	}
	c := &conn{raw: raw}
	if m.cfg.Mode == ModeTLS {
		c.tls = tls.Client(raw, m.tlsConfig)
		if err := c.tls.HandshakeContext(dctx); err != nil {
			_ = raw.Close()
			return nil, m.fail(ctx, stageDial, fmt.Errorf("TLS handshake: %w", err))
		}
	}
	return c, nil
}

// exchange runs one attempt on c under the exchange deadline, min(
// ExchangeBudget, the caller's deadline), set on the socket itself because
// go-mail's client bounds nothing on its own. Cancelling ctx closes the
// socket, which aborts whatever read or write is in flight. Afterwards c
// goes back to the pool or is closed.
func (m *Mailer) exchange(ctx context.Context, c *conn, l letter) (st stage, err error) {
	deadline := time.Now().Add(m.exchangeBudget)
	replyDeadline := deadline
	if d, ok := ctx.Deadline(); ok {
		if d.Before(deadline) {
			deadline = d
		}
		// The reply to the final dot may use all the caller has left.
		replyDeadline = d
	}
	if err := c.raw.SetDeadline(deadline); err != nil {
		c.close()
		return stageGreeting, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.raw.Close() })
	defer func() {
		aborted := !stop()
		m.release(c, st, err, aborted)
	}()

	if c.client == nil {
		if st, err = m.open(ctx, c); err != nil {
			return st, err
		}
	}
	return m.transact(c, l, replyDeadline)
}

// open reads the greeting, says EHLO, secures the session as the mode
// demands and authenticates. go-mail's high-level Client is not used: it
// bounds only the dial, and leaves the socket open after a refused STARTTLS
// or AUTH. Its protocol client is used step by step instead, so the checks
// below are ours.
func (m *Mailer) open(ctx context.Context, c *conn) (stage, error) {
	var nc net.Conn = c.raw
	if c.tls != nil {
		nc = c.tls
	}
	client, err := gomail.NewClient(nc, m.cfg.Host)
	if err != nil {
		return stageGreeting, err
	}
	c.client = client
	if err := client.Hello(m.helo); err != nil {
		return stageHello, err
	}
	if m.cfg.Mode == ModeSTARTTLS {
		_, span := tracing.Step(ctx, tracing.SpanSMTPStartTLS)
		err = m.secure(client)
		endSpan(span, err)
	} else {
		err = m.secure(client)
	}
	if err != nil {
		return stageSTARTTLS, err
	}
	if err := m.authenticate(client); err != nil {
		return stageAuth, err
	}
	return stageMail, nil
}

// secure enforces the mode. In starttls mode an absent STARTTLS is a
// refusal, never a reason to carry on in plaintext: a man in the middle
// deletes the advertisement precisely to get that fallback.
func (m *Mailer) secure(c *gomail.Client) error {
	switch m.cfg.Mode {
	case ModeNone:
		return nil
	case ModeSTARTTLS:
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return fmt.Errorf("%w: the server did not advertise STARTTLS", ErrSTARTTLSRefused)
		}
		if err := c.StartTLS(m.tlsConfig); err != nil {
			return fmt.Errorf("%w: %w", ErrSTARTTLSRefused, err)
		}
	}
	// Whatever led here, nothing more is said on a session that is not
	// encrypted to a verified peer.
	if st, ok := c.TLSConnectionState(); !ok || !st.HandshakeComplete {
		return fmt.Errorf("%w: the session is not encrypted", ErrSTARTTLSRefused)
	}
	return nil
}

// authenticate uses the configured credentials only if the relay advertises
// AUTH (after TLS, which secure has established). Configured but not
// advertised: warn and let the relay decide whether to accept the mail.
func (m *Mailer) authenticate(c *gomail.Client) error {
	if m.cfg.Username == "" {
		return nil
	}
	ok, mechs := c.Extension("AUTH")
	if !ok {
		m.log.Warn("smtp: AUTH is configured but the server does not advertise it; sending without AUTH, the relay decides",
			"host", m.cfg.Host, "port", m.cfg.Port, "mode", m.cfg.Mode)
		return nil
	}
	// Config refuses none+credentials for remote hosts; this re-checks at
	// the point of use, where it cannot be bypassed by a new code path.
	if st, on := c.TLSConnectionState(); !(on && st.HandshakeComplete) && !isLoopback(m.cfg.Host) {
		return fmt.Errorf("refusing to send credentials in plaintext to %s, which is not loopback", m.cfg.Host)
	}
	var a gomail.Auth
	switch {
	case hasMechanism(mechs, "PLAIN"):
		a = gomail.PlainAuth("", m.cfg.Username, m.cfg.Password, m.cfg.Host, false)
	case hasMechanism(mechs, "LOGIN"):
		a = gomail.LoginAuth(m.cfg.Username, m.cfg.Password, m.cfg.Host, false)
	default:
		return fmt.Errorf("the server offers AUTH %s; postbox speaks PLAIN and LOGIN", mechs)
	}
	if err := c.Auth(a); err != nil {
		return fmt.Errorf("as %q: %w", m.cfg.Username, err)
	}
	return nil
}

func hasMechanism(advertised, mech string) bool {
	for _, f := range strings.Fields(advertised) {
		if strings.EqualFold(f, mech) {
			return true
		}
	}
	return false
}

// transact sends one message. The stage it returns says how far it got.
//
// The final dot is written and flushed on its own, so that what follows is
// known to be the wait for the relay's reply with the whole message handed
// over. A reply (any code) is classified as usual. No reply — a timeout, a
// reset, an EOF, a cancelled context — is a *noReplyError: the relay may
// have accepted and queued the message and simply not said so, so sending
// it again could deliver it twice (see PossiblyDeliveredError).
//
// The reply may take until replyDeadline: the caller's deadline when it has
// one (the row's dial and exchange budgets: whatever the dial and the rest of
// the exchange did not use), else the exchange deadline. RFC 5321 §4.5.3.2.6
// advises ten minutes, which no per-row budget of postbox can hold (see
// docs/design/outbox-transport.md, Derived constants): the claim lease of a
// batch of BatchSize rows would grow to about an hour, and one silent relay
// would stall every row behind it. Not retrying is what bounds the duplicates
// instead.
func (m *Mailer) transact(c *conn, l letter, replyDeadline time.Time) (stage, error) {
	client := c.client
	if err := client.Mail("<" + l.from + ">"); err != nil {
		return stageMail, err
	}
	if err := client.Rcpt("<" + l.to + ">"); err != nil {
		return stageRcpt, err
	}
	w, err := client.Data()
	if err != nil {
		return stageData, err
	}
	if _, err := w.Write(l.data); err != nil {
		return stageContent, err
	}
	dc, ok := w.(*gomail.DataCloser)
	if !ok {
		return stageContent, fmt.Errorf("unexpected DATA writer %T", w)
	}
	// DataCloser.Close writes the dot and reads the reply in one call,
	// discarding the write's error; do the two halves apart.
	if err := dc.WriteCloser.Close(); err != nil {
		return stageContent, err // the dot did not reach the socket
	}
	dotAt := time.Now()
	if err := c.raw.SetDeadline(replyDeadline); err != nil {
		return stageReply, &noReplyError{err: err}
	}
	if _, _, err := client.Text.ReadResponse(250); err != nil {
		var te *textproto.Error
		if errors.As(err, &te) {
			return stageReply, err
		}
		waited := time.Since(dotAt)
		if waited >= time.Millisecond {
			waited = waited.Round(time.Millisecond)
		}
		return stageReply, &noReplyError{waited: waited, err: err}
	}
	return stageReply, nil
}

// noReplyError is a failure to read the reply to the final dot: no reply
// arrived. deliver turns it into a *PossiblyDeliveredError.
type noReplyError struct {
	waited time.Duration
	err    error
}

func (e *noReplyError) Error() string { return e.err.Error() }
func (e *noReplyError) Unwrap() error { return e.err }

// release keeps c for the next message when its session is known to be
// clean, and closes it otherwise.
func (m *Mailer) release(c *conn, st stage, err error, aborted bool) {
	if aborted {
		c.close()
		return
	}
	if err == nil {
		m.pool.put(c)
		return
	}
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code == 421 || !st.transactional() {
		c.close()
		return
	}
	// The relay refused this message but the session is healthy. After the
	// final dot the transaction is already over; before it, RSET ends it.
	if st < stageContent && c.client.Reset() != nil {
		c.close()
		return
	}
	m.pool.put(c)
}
