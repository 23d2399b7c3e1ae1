package smtp

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	netmail "net/mail"
	"os"
	"strconv"
	"strings"
	"time"
)

// Mode is how the connection to the relay is protected (SMTP_TLS).
type Mode string

const (
	// ModeSTARTTLS connects in plaintext and requires STARTTLS before
	// anything else is said. The default.
	ModeSTARTTLS Mode = "starttls"
	// ModeTLS speaks TLS from the first byte (the port 465 convention).
	ModeTLS Mode = "tls"
	// ModeNone is plaintext, for local development only: refused at send
	// time when APP_ENV=production.
	ModeNone Mode = "none"
)

// Config is the relay a Mailer delivers to. ConfigFromEnv fills it from the
// environment; New validates it.
type Config struct {
	Host     string // SMTP_HOST
	Port     int    // SMTP_PORT
	Mode     Mode   // SMTP_TLS
	Username string // SMTP_USERNAME; AUTH is configured when set
	Password string // SMTP_PASSWORD; never logged or printed
	From     string // SMTP_FROM: envelope sender, From header, Message-ID domain
	CAFile   string // SMTP_CA_FILE: PEM roots trusted in addition to the system's
	AppEnv   string // APP_ENV; "production" forbids ModeNone

	// MaxIdle bounds the connections kept open between sends; 0 means 8,
	// negative means a new connection per message.
	MaxIdle int
	// IdleTimeout closes a connection unused this long; 0 means 30 s.
	// Relays drop idle clients on their own schedule, so keep it short.
	IdleTimeout time.Duration
}

const (
	defaultHost        = "localhost"
	defaultFrom        = "postbox@localhost"
	defaultAppEnv      = "development"
	defaultMaxIdle     = 8
	defaultIdleTimeout = 30 * time.Second
)

// describe is the mode as the boot line says it.
func (m Mode) describe() string {
	switch m {
	case ModeTLS:
		return "implicit TLS (SMTP_TLS=tls)"
	case ModeNone:
		return "plaintext (SMTP_TLS=none)"
	default:
		return "STARTTLS required (SMTP_TLS=starttls)"
	}
}

// defaultPort follows the mode: submission (587) for STARTTLS, submissions
// (465) for implicit TLS, and 1025 for none, because plaintext only exists
// for a local sink such as Mailpit, which listens there.
func defaultPort(m Mode) int {
	switch m {
	case ModeTLS:
		return 465
	case ModeNone:
		return 1025
	default:
		return 587
	}
}

// ConfigFromEnv reads SMTP_HOST, SMTP_PORT, SMTP_TLS, SMTP_USERNAME,
// SMTP_PASSWORD, SMTP_FROM, SMTP_CA_FILE and APP_ENV through lookup
// (os.LookupEnv in production). Unset variables take defaults a newcomer can
// run with; a bad value is an error naming the variable, never a fallback.
// All problems are reported together.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var errs []error

	cfg := Config{
		Host:     get("SMTP_HOST"),
		Username: get("SMTP_USERNAME"),
		From:     get("SMTP_FROM"),
		CAFile:   get("SMTP_CA_FILE"),
		AppEnv:   get("APP_ENV"),
	}
	// A password may legitimately start or end with a space.
	cfg.Password, _ = lookup("SMTP_PASSWORD")

	mode, err := parseMode(get("SMTP_TLS"))
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Mode = mode

	if v := get("SMTP_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("SMTP_PORT=%q: must be a port number 1-65535", v))
		}
		cfg.Port = p
	}
	cfg = cfg.withDefaults()
	if len(errs) == 0 {
		if err := cfg.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("smtp config: %w", err)
	}
	return cfg, nil
}

func parseMode(v string) (Mode, error) {
	switch m := Mode(strings.ToLower(v)); m {
	case "":
		return ModeSTARTTLS, nil
	case ModeSTARTTLS, ModeTLS, ModeNone:
		return m, nil
	}
	return ModeSTARTTLS, fmt.Errorf("SMTP_TLS=%q: must be starttls, tls or none", v)
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeSTARTTLS
	}
	if c.Host == "" {
		c.Host = defaultHost
	}
	if c.Port == 0 {
		c.Port = defaultPort(c.Mode)
	}
	if c.From == "" {
		c.From = defaultFrom
	}
	if c.AppEnv == "" {
		c.AppEnv = defaultAppEnv
	}
	if c.MaxIdle == 0 {
		c.MaxIdle = defaultMaxIdle
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = defaultIdleTimeout
	}
	return c
}

// validate checks a defaulted Config. Errors name the environment variable
// behind the field, since that is what an operator has to fix.
func (c Config) validate() error {
	var errs []error
	if _, err := parseMode(string(c.Mode)); err != nil {
		errs = append(errs, err)
	}
	if strings.ContainsAny(c.Host, " \t\r\n/") {
		errs = append(errs, fmt.Errorf("SMTP_HOST=%q: not a host name or address", c.Host))
	}
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("SMTP_PORT=%d: must be a port number 1-65535", c.Port))
	}
	if _, err := parseFrom(c.From); err != nil {
		errs = append(errs, err)
	}
	if (c.Username == "") != (c.Password == "") {
		errs = append(errs, errors.New("SMTP_USERNAME and SMTP_PASSWORD: set both or neither"))
	}
	if c.Mode == ModeNone && c.Username != "" && !isLoopback(c.Host) {
		// Credentials never cross a network in plaintext. Refusing at boot
		// beats sending unauthenticated and being rejected row by row.
		errs = append(errs, fmt.Errorf("SMTP_TLS=none with SMTP_USERNAME set: credentials would travel in plaintext to %s, which is not loopback; use starttls or tls", c.Host))
	}
	if c.CAFile != "" {
		if _, err := loadRoots(c.CAFile); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// parseFrom accepts one address, optionally with a display name.
func parseFrom(from string) (*netmail.Address, error) {
	if strings.ContainsAny(from, "\r\n") {
		return nil, fmt.Errorf("SMTP_FROM=%q: contains CR or LF", from)
	}
	a, err := netmail.ParseAddress(from)
	if err != nil {
		return nil, fmt.Errorf("SMTP_FROM=%q: %w", from, err)
	}
	return a, nil
}

// loadRoots returns the system roots plus the certificates in path: the
// file adds a private relay's CA, it does not replace public trust.
func loadRoots(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("SMTP_CA_FILE=%q: %w", path, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("SMTP_CA_FILE=%q: no PEM certificate found", path)
	}
	return pool, nil
}

// isLoopback decides by name only: resolving would let DNS decide where
// credentials may go in plaintext.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c Config) production() bool {
	return strings.EqualFold(strings.TrimSpace(c.AppEnv), "production")
}

// String keeps the password out of %v and %+v.
func (c Config) String() string {
	return fmt.Sprintf("smtp.Config{Host:%s Port:%d Mode:%s Username:%q Password:%s From:%q CAFile:%q AppEnv:%q}",
		c.Host, c.Port, c.Mode, c.Username, redacted(c.Password), c.From, c.CAFile, c.AppEnv)
}

// GoString keeps the password out of %#v.
func (c Config) GoString() string { return c.String() }

// LogValue keeps the password out of structured logs.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("host", c.Host),
		slog.Int("port", c.Port),
		slog.String("mode", string(c.Mode)),
		slog.Bool("auth_configured", c.Username != ""),
		slog.String("from", c.From),
		slog.String("ca_file", c.CAFile),
		slog.String("app_env", c.AppEnv),
	)
}

func redacted(s string) string {
	if s == "" {
		return `""`
	}
	return "[redacted]"
}
