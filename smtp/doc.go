// Package smtp is postbox's one way to hand an email to a relay.
//
// Every message, in every mode, goes through the same delivery path (see
// docs/design/outbox-transport.md, One SMTP path). It exists because the path
// it replaced upgraded to TLS opportunistically: a man in the middle who
// deleted STARTTLS from the relay's EHLO reply silently got invoices in
// plaintext. Here the mode is a requirement, not a preference, and a
// downgrade is an error.
//
// # Modes (SMTP_TLS)
//
//   - starttls (default): connect in plaintext, then STARTTLS is required.
//     If the relay does not advertise it, or the handshake fails, Send
//     returns ErrSTARTTLSRefused before MAIL FROM, AUTH or anything else
//     beyond EHLO, and logs it at error level.
//   - tls: TLS from the first byte (port 465).
//   - none: plaintext, for local development. With APP_ENV=production every
//     Send fails with ErrPlaintextForbidden (logged at error level, naming
//     SMTP_TLS and APP_ENV), and New warns at boot; `worker` refuses to
//     start with that pair, so only a library caller reaches the send check.
//
// Certificates are always verified against the system roots plus, with
// SMTP_CA_FILE, a private relay's CA. No option turns verification off.
//
// AUTH is attempted only when credentials are configured and the relay
// advertises AUTH after TLS. Configured but not advertised, the message goes
// without AUTH (a warning names the host) and the relay decides. Credentials
// never travel in plaintext to a host that is not loopback: Config refuses
// SMTP_TLS=none with credentials for a remote host.
//
// # Deadlines
//
// Dialing (and the implicit-TLS handshake) is bounded by leases.DialBudget.
// The exchange is bounded by min(leases.ExchangeBudget, the time left on
// the caller's context), enforced on the socket; cancelling the context
// closes the socket, aborting the exchange in flight.
//
// # Errors
//
// Callers branch with errors.Is and errors.As:
//
//   - ErrPermanent: retrying cannot help. A 5xx reply to MAIL FROM, RCPT TO
//     or DATA (a *ReplyError keeping the code, enhanced code and text), or a
//     message that cannot be sent as built: CR or LF in a header value
//     (header injection), an unparsable To, no body. Invalid messages fail
//     before any connection is made.
//   - ErrPossiblyDelivered (a *PossiblyDeliveredError): the whole message,
//     final dot included, was handed over and no reply came — a timeout, a
//     lost connection, a cancelled context. The relay may have queued it.
//     It also matches ErrPermanent, so the outbox fails the row instead of
//     sending it again; its text tells the operator to check the recipient
//     before requeueing. The reply may take all the caller's deadline has
//     left, beyond the exchange budget.
//   - ErrSTARTTLSRefused, ErrPlaintextForbidden: configuration or network
//     integrity problems. Transient for the outbox: fixing the relay or the
//     configuration resumes delivery without an operator.
//   - Everything else is transient: 4xx replies (a *ReplyError), network
//     errors, timeouts (with the caller's context error in the chain when
//     the context ended the exchange), TLS failures, and 5xx replies to the
//     greeting, EHLO or AUTH, which concern the connection and the
//     credentials rather than the message.
//
// # Connections
//
// A Mailer keeps a few idle sessions (past greeting, TLS and AUTH) and
// reuses them, as http.Transport does; Close releases them. A reused
// session the relay closed while idle is replaced by a fresh one, once, and
// only if the failure came before DATA: from DATA on the relay may hold the
// message, and retrying could deliver it twice.
//
// The message is built with github.com/wneessen/go-mail and spoken with its
// smtp protocol client, driven step by step so that every check above is
// made here rather than assumed of the library.
package smtp
