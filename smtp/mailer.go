package smtp

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	netmail "net/mail"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/leases"
)

// Mailer sends Messages to one relay. It is safe for concurrent use and
// keeps a few idle connections for reuse; Close releases them.
type Mailer struct {
	cfg         Config
	log         *slog.Logger
	addr        string // host:port, for dialing and for every error
	tlsConfig   *tls.Config
	from        *netmail.Address
	msgIDDomain string
	helo        string
	production  bool

	// From leases/ (see docs/design/outbox-transport.md, Derived constants);
	// fields only so tests can shrink them instead of waiting 30 s.
	dialBudget     time.Duration
	exchangeBudget time.Duration

	dialer net.Dialer
	pool   pool
}

// New validates cfg, fills its defaults and logs the active transport, so a
// misconfiguration diagnoses itself at boot. A nil logger discards.
//
// SMTP_TLS=none with APP_ENV=production is not an error here, only a
// warning: the worker still boots (its webhooks and health endpoints keep
// working) and every Send fails loudly with ErrPlaintextForbidden until the
// configuration is fixed.
func New(cfg Config, logger *slog.Logger) (*Mailer, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("smtp config: %w", err)
	}
	from, err := parseFrom(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("smtp config: %w", err)
	}
	m := &Mailer{
		cfg:            cfg,
		log:            logger,
		addr:           net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		from:           from,
		msgIDDomain:    messageIDDomain(from.Address),
		helo:           heloName(),
		production:     cfg.production(),
		dialBudget:     leases.DialBudget,
		exchangeBudget: leases.ExchangeBudget,
		pool:           pool{max: cfg.MaxIdle, timeout: cfg.IdleTimeout},
	}
	// Certificates are always verified: there is deliberately no option to
	// skip verification, only SMTP_CA_FILE to trust a private relay's CA.
	m.tlsConfig = &tls.Config{ServerName: cfg.Host, MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		if m.tlsConfig.RootCAs, err = loadRoots(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("smtp config: %w", err)
		}
	}
	m.logBoot()
	return m, nil
}

// Send delivers msg through the one delivery path (see the package
// documentation for modes, deadlines and error classes). It returns nil
// only when the relay accepted the message.
func (m *Mailer) Send(ctx context.Context, msg Message) error {
	return m.deliver(ctx, msg)
}

// Close closes the idle connections. Sends in flight finish on their own
// connections, which are then closed instead of kept; a Send after Close
// still works, on a connection of its own.
func (m *Mailer) Close() error {
	m.pool.close()
	return nil
}

func (m *Mailer) logBoot() {
	c := m.cfg
	// The message itself says where mail goes, so the one line a
	// newcomer reads shows a relay left at its default.
	m.log.Info("smtp transport: mail goes to "+m.addr+", "+c.Mode.describe()+", "+authWord(c.Username != ""),
		"mode", c.Mode, "host", c.Host, "port", c.Port,
		"auth_configured", c.Username != "",
		"from", c.From, "ca_file", c.CAFile, "app_env", c.AppEnv)
	switch {
	case c.Mode == ModeNone && m.production:
		m.log.Warn("smtp: SMTP_TLS=none is forbidden with APP_ENV=production; every send will fail until SMTP_TLS is starttls or tls",
			"SMTP_TLS", c.Mode, "APP_ENV", c.AppEnv, "host", c.Host, "port", c.Port)
	case c.Mode == ModeNone:
		m.log.Warn("smtp: SMTP_TLS=none: mail travels unencrypted; allowed only outside production",
			"SMTP_TLS", c.Mode, "APP_ENV", c.AppEnv, "host", c.Host, "port", c.Port)
	}
}

// authWord is the boot line's word for whether AUTH is configured; never
// more, the user name and password stay out of the log.
func authWord(configured bool) string {
	if configured {
		return "AUTH configured"
	}
	return "no AUTH"
}

// messageIDDomain is the right half of our Message-IDs: the sender's domain,
// so ids are unique to us and a provider's webhooks echo them back intact.
func messageIDDomain(addr string) string {
	d := strings.ToLower(addr[strings.LastIndexByte(addr, '@')+1:])
	if d == "" || !isAtext(d) {
		return "localhost"
	}
	return d
}

// heloName is what we call ourselves in EHLO. Relays log it; some reject
// a syntactically invalid one, so fall back to "localhost".
func heloName() string {
	h, err := os.Hostname()
	if err != nil || h == "" || len(h) > 253 {
		return "localhost"
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return "localhost"
		}
	}
	return h
}
