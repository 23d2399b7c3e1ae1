// Package smtpsink is an in-process SMTP server that accepts mail on a
// loopback port and remembers it. Tests use it to watch what a client really
// sent; `worker demo` and the bench (internal/tooling/cmd/bench) use it as a relay that needs no
// setup. It is built on emersion/go-smtp, so the protocol is a real server's,
// with STARTTLS, implicit TLS and AUTH PLAIN available on request.
//
// It is made for throughput: one short critical section per accepted
// message, counters kept atomically, and nothing logged per message.
package smtpsink

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"mime"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
)

// Options configure a Sink. The zero value is a plaintext sink without AUTH
// that accepts everything.
type Options struct {
	// TLSConfig, when set, makes the sink advertise STARTTLS, or with
	// ImplicitTLS serve TLS from the first byte.
	TLSConfig   *tls.Config
	ImplicitTLS bool

	// Users, when non-empty, enables AUTH PLAIN (advertised only over TLS
	// unless AllowInsecureAuth) and makes AUTH mandatory: MAIL FROM without
	// it is answered 530 5.7.0, as a real submission relay would.
	Users             map[string]string
	AllowInsecureAuth bool

	// Fault, when set, sees each message after its data arrived; a non-nil
	// result rejects the message with that reply (return a *gosmtp.SMTPError
	// to choose the code).
	Fault func(Envelope) error

	// RejectRcpt, when set, sees each RCPT TO address; a non-nil result
	// refuses that recipient with that reply, as a relay that knows its
	// mailboxes does (return UserUnknown for 550 5.1.1).
	RejectRcpt func(to string) error

	// Hang, when it returns true for a message, holds the reply to its
	// DATA until the sink or the connection is closed (or a minute passes),
	// then answers 451. The message is not accepted.
	Hang func(Envelope) bool

	// DiscardData drops message bodies after parsing their headers, for
	// long benchmark runs.
	DiscardData bool

	// DataDelay holds every reply to DATA this long after the message
	// arrived, as a relay that takes time per message would (the bench
	// models "connections ÷ per-message time" with it). Received.At is
	// taken after the delay, when the message is accepted. Closing the
	// sink cuts the delay short, and the message is then not accepted.
	DataDelay time.Duration

	// Gauge, when set, also counts this sink's open connections, so
	// several sinks (one per worker replica) can share one figure of
	// connections open at once.
	Gauge *Gauge

	// Logger receives go-smtp's own error reports; nil discards them.
	Logger *slog.Logger
}

// UserUnknown is the reply a relay gives for a mailbox it does not have:
// 550 5.1.1, for Options.RejectRcpt.
func UserUnknown(to string) error {
	return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1},
		Message: "<" + to + ">: Recipient address rejected: User unknown in virtual mailbox table"}
}

// holdMax bounds how long Hang holds a reply, so a forgotten sink cannot
// pin a goroutine forever.
const holdMax = time.Minute

// Envelope is a message as the sink saw it before accepting it.
type Envelope struct {
	From string
	To   []string
	Data []byte
}

// Received is an accepted message.
type Received struct {
	From      string
	To        []string
	MessageID string // as in the header, angle brackets included
	RowID     string // the left part of <RowID@domain>, or "" without a Message-ID
	Subject   string // decoded
	Data      []byte // nil with DiscardData
	At        time.Time
	AuthUser  string // "" when the client did not authenticate
	TLS       bool   // the message arrived over TLS
}

// Sink is a running SMTP server.
type Sink struct {
	opts   Options
	server *gosmtp.Server
	ln     net.Listener
	closed chan struct{}
	once   sync.Once

	mailFrom atomic.Int64
	conns    atomic.Int64
	gauge    Gauge // this sink's own open connections and their peak

	mu      sync.Mutex
	msgs    []Received
	arrived chan struct{} // closed and replaced on every accepted message
	open    map[*trackedConn]struct{}
}

// Start listens on 127.0.0.1 on a free port and serves until Close.
func Start(opts Options) (*Sink, error) {
	if opts.ImplicitTLS && opts.TLSConfig == nil {
		return nil, errors.New("smtpsink: ImplicitTLS needs a TLSConfig")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{
		opts:    opts,
		ln:      ln,
		closed:  make(chan struct{}),
		arrived: make(chan struct{}),
		open:    make(map[*trackedConn]struct{}),
	}

	srv := gosmtp.NewServer(gosmtp.BackendFunc(s.newSession))
	srv.Domain = "localhost"
	srv.MaxMessageBytes = 50 << 20
	srv.MaxRecipients = 100
	srv.AllowInsecureAuth = opts.AllowInsecureAuth
	// Generous, but finite: a client that vanishes must not pin a goroutine.
	srv.ReadTimeout = 2 * time.Minute
	srv.WriteTimeout = 2 * time.Minute
	srv.ErrorLog = log.New(io.Discard, "", 0)
	if opts.Logger != nil {
		srv.ErrorLog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)
	}
	var serveLn net.Listener = &trackingListener{Listener: ln, sink: s}
	if opts.ImplicitTLS {
		serveLn = tls.NewListener(serveLn, opts.TLSConfig)
	} else {
		srv.TLSConfig = opts.TLSConfig
	}
	s.server = srv
	go func() { _ = srv.Serve(serveLn) }()
	return s, nil
}

// Host is the address the sink listens on, 127.0.0.1.
func (s *Sink) Host() string { return "127.0.0.1" }

// Port is the sink's TCP port.
func (s *Sink) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Addr is host:port.
func (s *Sink) Addr() string { return net.JoinHostPort(s.Host(), strconv.Itoa(s.Port())) }

// Messages returns a copy of the accepted messages, in acceptance order.
func (s *Sink) Messages() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.msgs...)
}

// Len is the number of accepted messages.
func (s *Sink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// CountByRowID counts accepted messages per outbox row id, which is how a
// test sees duplicates.
func (s *Sink) CountByRowID() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.msgs))
	for _, m := range s.msgs {
		out[m.RowID]++
	}
	return out
}

// WaitFor blocks until at least n messages were accepted or ctx ends.
func (s *Sink) WaitFor(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, arrived := len(s.msgs), s.arrived
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// SawMailFrom is the number of MAIL FROM commands received, accepted or
// not. A client that refused to proceed leaves it at zero.
func (s *Sink) SawMailFrom() int { return int(s.mailFrom.Load()) }

// Connections is the number of TCP connections accepted so far.
func (s *Sink) Connections() int { return int(s.conns.Load()) }

// OpenConnections is the number of connections open now.
func (s *Sink) OpenConnections() int { return s.gauge.Open() }

// PeakConnections is the most connections that were open at once.
func (s *Sink) PeakConnections() int { return s.gauge.Peak() }

// Gauge counts connections open at once, and the most that ever were. The
// zero value is ready; one Gauge may be shared by several sinks.
type Gauge struct {
	open atomic.Int64
	peak atomic.Int64
}

// Open is the number of connections open now.
func (g *Gauge) Open() int { return int(g.open.Load()) }

// Peak is the most connections that were open at once.
func (g *Gauge) Peak() int { return int(g.peak.Load()) }

func (g *Gauge) inc() {
	n := g.open.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (g *Gauge) dec() { g.open.Add(-1) }

// DropConnections closes every open connection without a goodbye, as a
// relay restarting or timing out idle clients would, and returns how many
// it closed. The sink keeps listening.
func (s *Sink) DropConnections() int {
	s.mu.Lock()
	open := make([]*trackedConn, 0, len(s.open))
	for c := range s.open {
		open = append(open, c)
	}
	s.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
	return len(open)
}

// Close stops the sink, releases held replies and closes all connections.
func (s *Sink) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		err = s.server.Close()
	})
	return err
}

func (s *Sink) newSession(c *gosmtp.Conn) (gosmtp.Session, error) {
	nc := c.Conn()
	tc, isTLS := nc.(*tls.Conn)
	if isTLS {
		nc = tc.NetConn()
	}
	tracked, _ := nc.(*trackedConn)
	return &session{sink: s, tls: isTLS, conn: tracked, gone: make(chan struct{})}, nil
}

func (s *Sink) accept(r Received) {
	s.mu.Lock()
	s.msgs = append(s.msgs, r)
	close(s.arrived)
	s.arrived = make(chan struct{})
	s.mu.Unlock()
}

type session struct {
	sink     *Sink
	conn     *trackedConn
	tls      bool
	authUser string
	from     string
	to       []string
	gone     chan struct{}
	goneOnce sync.Once
}

func (ss *session) AuthMechanisms() []string {
	if len(ss.sink.opts.Users) == 0 {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain || len(ss.sink.opts.Users) == 0 {
		return nil, gosmtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, username, password string) error {
		if want, ok := ss.sink.opts.Users[username]; !ok || want != password {
			return gosmtp.ErrAuthFailed
		}
		ss.authUser = username
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *gosmtp.MailOptions) error {
	ss.sink.mailFrom.Add(1)
	if len(ss.sink.opts.Users) > 0 && ss.authUser == "" {
		return &gosmtp.SMTPError{Code: 530, EnhancedCode: gosmtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	if f := ss.sink.opts.RejectRcpt; f != nil {
		if err := f(to); err != nil {
			return err
		}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	env := Envelope{From: ss.from, To: ss.to, Data: data}
	opts := &ss.sink.opts
	if opts.Hang != nil && opts.Hang(env) {
		timer := time.NewTimer(holdMax)
		defer timer.Stop()
		var dropped <-chan struct{}
		if ss.conn != nil {
			dropped = ss.conn.closed
		}
		select {
		case <-ss.sink.closed:
		case <-ss.gone:
		case <-dropped:
		case <-timer.C:
		}
		return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "held reply released"}
	}
	if opts.Fault != nil {
		if err := opts.Fault(env); err != nil {
			return err
		}
	}
	if opts.DataDelay > 0 {
		timer := time.NewTimer(opts.DataDelay)
		select {
		case <-timer.C:
		case <-ss.sink.closed:
			timer.Stop()
			return &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "sink closing"}
		}
	}
	rec := Received{
		From:     ss.from,
		To:       append([]string(nil), ss.to...),
		At:       time.Now(),
		AuthUser: ss.authUser,
		TLS:      ss.tls,
		Data:     data,
	}
	rec.MessageID, rec.RowID, rec.Subject = parseHeader(data)
	if opts.DiscardData {
		rec.Data = nil
	}
	ss.sink.accept(rec)
	return nil
}

func (ss *session) Reset() {
	ss.from, ss.to = "", nil
}

func (ss *session) Logout() error {
	ss.goneOnce.Do(func() { close(ss.gone) })
	return nil
}

// trackingListener counts and remembers connections at accept time, below
// any TLS, so DropConnections can cut them and a STARTTLS upgrade (which
// go-smtp models as a new Session) is not counted twice.
type trackingListener struct {
	net.Listener
	sink *Sink
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, sink: l.sink, closed: make(chan struct{})}
	l.sink.conns.Add(1)
	l.sink.gauge.inc()
	if g := l.sink.opts.Gauge; g != nil {
		g.inc()
	}
	l.sink.mu.Lock()
	l.sink.open[tc] = struct{}{}
	l.sink.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	sink   *Sink
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.sink.gauge.dec()
		if g := c.sink.opts.Gauge; g != nil {
			g.dec()
		}
		c.sink.mu.Lock()
		delete(c.sink.open, c)
		c.sink.mu.Unlock()
	})
	return c.Conn.Close()
}

var wordDecoder = new(mime.WordDecoder)

// parseHeader reads only the header block: the bench pushes thousands of
// messages a second through here.
func parseHeader(data []byte) (messageID, rowID, subject string) {
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(data))).ReadMIMEHeader()
	if err != nil && len(h) == 0 {
		return "", "", ""
	}
	messageID = strings.TrimSpace(h.Get("Message-Id"))
	if id, ok := strings.CutPrefix(messageID, "<"); ok {
		id = strings.TrimSuffix(id, ">")
		if i := strings.LastIndexByte(id, '@'); i >= 0 {
			rowID = id[:i]
		}
	}
	subject = h.Get("Subject")
	if dec, err := wordDecoder.DecodeHeader(subject); err == nil {
		subject = dec
	}
	return messageID, rowID, subject
}
