package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/cmd/worker/internal/poolsize"
	"github.com/postbox/postbox/cmd/worker/internal/setting"
	"github.com/postbox/postbox/cmd/worker/internal/telemetry"
	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/internal/operator/httpapi"
	"github.com/postbox/postbox/internal/operator/portalsite"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/migrations"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/outbox/mailevents"
	"github.com/postbox/postbox/smtp"
	"github.com/postbox/postbox/webhook"
)

// Config is everything the worker reads from the environment. Every field
// has a default a newcomer can run with; a value that does not parse is an
// error naming its variable, never a silent fallback.
type Config struct {
	DatabaseURL     string        // DATABASE_URL
	AppEnv          string        // APP_ENV: development, test or production
	HTTPAddr        string        // HTTP_ADDR: health, metrics, River UI
	LogLevel        slog.Level    // LOG_LEVEL: debug, info, warn, error
	RiverUIUser     string        // RIVERUI_USERNAME
	RiverUIPassword string        // RIVERUI_PASSWORD
	ShutdownTimeout time.Duration // SHUTDOWN_TIMEOUT: soft stop before hard stop
	PollInterval    time.Duration // POLL_INTERVAL: how often an idle lane claims without a wake-up
	// EmailConcurrency is the email batches in flight per replica, and so
	// its SMTP connections (EMAIL_CONCURRENCY).
	EmailConcurrency int
	// EmailRateLimit is the pool-wide email send rate, messages a second
	// (EMAIL_RATE_LIMIT); 0: none.
	EmailRateLimit float64
	// RetryBackoffScale multiplies the email and webhook retry schedules
	// (RETRY_BACKOFF_SCALE). Only for soak tests and staging: production
	// refuses anything but 1.
	RetryBackoffScale float64
	SMTP              smtp.Config
	Webhook           webhook.Settings
	Leases            leases.Config
	Keys              *outbox.KeyRing // OUTBOX_ENCRYPTION_KEYS; nil = secret payload fields in plaintext
	// Events are the delivery-event endpoints' credentials and the
	// soft-bounce policy (POSTMARK_WEBHOOK_*, SES_SNS_TOPIC_ARNS,
	// EVENTS_WEBHOOK_SECRET, SOFT_BOUNCE_*).
	Events mailevents.Settings
	// OpsEmail (OPS_EMAIL) is mailed, through the email outbox, when a
	// webhook endpoint is disabled for failing; empty: no email.
	OpsEmail string
	// Tracing is OpenTelemetry tracing, from the standard OTEL_*
	// variables (internal/telemetry); off unless an OTLP endpoint is set.
	Tracing telemetry.Config
	// TemplatesDir (EMAIL_TEMPLATES_DIR) is the email template directory
	// (docs/TEMPLATES.md); empty: the built-in kinds only. LoadConfig checks
	// it is a directory; `worker run` loads and proves it (templates.go).
	TemplatesDir string

	// History is how long the history tables keep their rows
	// (EMAIL_HISTORY_RETENTION, WEBHOOK_HISTORY_RETENTION).
	History history.Retention

	// Pooling is what DATABASE_URL reaches, a session or a transaction
	// pooler, and DATABASE_DIRECT_URL (internal/pooling).
	Pooling pooling.Config

	// Portal is the tenant portal's (PORTAL_*): served under /portal/
	// when PORTAL_SIGNING_KEY is set.
	Portal portalsite.Settings

	// API is the HTTP API's (API_KEYS, API_RATE_LIMIT): served under
	// /api/v1/ when API_KEYS is set.
	API httpapi.Settings
}

// Production reports APP_ENV=production.
func (c Config) Production() bool { return c.AppEnv == "production" }

// LoadConfig reads the environment through lookup.
func LoadConfig(lookup func(string) (string, bool)) (Config, error) {
	lookup, err := withFileVars(lookup)
	if err != nil {
		return Config{}, err
	}
	get := func(name, def string) string {
		if v, ok := lookup(name); ok && v != "" {
			return v
		}
		return def
	}
	c := Config{
		DatabaseURL:     get("DATABASE_URL", pgserver.DefaultURL),
		AppEnv:          get("APP_ENV", "development"),
		HTTPAddr:        get("HTTP_ADDR", "127.0.0.1:8080"),
		RiverUIUser:     get("RIVERUI_USERNAME", ""),
		RiverUIPassword: get("RIVERUI_PASSWORD", ""),
	}
	switch c.AppEnv {
	case "development", "test", "production":
	default:
		return c, fmt.Errorf("APP_ENV=%q: must be development, test or production", c.AppEnv)
	}
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		return c, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if c.Pooling, err = pooling.FromEnv(get, c.DatabaseURL); err != nil {
		return c, err
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return c, fmt.Errorf("HTTP_ADDR=%q: %w", c.HTTPAddr, err)
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("LOG_LEVEL", "info"))); err != nil {
		return c, fmt.Errorf("LOG_LEVEL=%q: must be debug, info, warn or error", get("LOG_LEVEL", ""))
	}
	if (c.RiverUIUser == "") != (c.RiverUIPassword == "") {
		return c, fmt.Errorf("RIVERUI_USERNAME and RIVERUI_PASSWORD must be set together")
	}
	if c.ShutdownTimeout, err = duration(get, "SHUTDOWN_TIMEOUT", "30s"); err != nil {
		return c, err
	}
	if c.PollInterval, err = duration(get, "POLL_INTERVAL", "1s"); err != nil {
		return c, err
	}
	conc := get("EMAIL_CONCURRENCY", strconv.Itoa(outbox.DefaultConcurrency))
	if c.EmailConcurrency, err = strconv.Atoi(conc); err != nil || c.EmailConcurrency < 1 || c.EmailConcurrency > maxEmailConcurrency {
		return c, fmt.Errorf("EMAIL_CONCURRENCY=%q: must be a whole number from 1 to %d", conc, maxEmailConcurrency)
	}
	if c.EmailRateLimit, err = outbox.RateLimitFromEnv(lookup); err != nil {
		return c, err
	}
	scale := get("RETRY_BACKOFF_SCALE", "1")
	if c.RetryBackoffScale, err = setting.Number("RETRY_BACKOFF_SCALE", scale, retryBackoffScale); err != nil {
		return c, err
	}
	if c.RetryBackoffScale != 1 && c.Production() {
		return c, fmt.Errorf("RETRY_BACKOFF_SCALE=%q: only 1 is allowed when APP_ENV=production", scale)
	}
	if c.SMTP, err = smtp.ConfigFromEnv(lookup); err != nil {
		return c, err
	}
	// The mailer would refuse each send anyway, but a worker that boots
	// claims every email and fails it, attempt by attempt, for the whole
	// retry schedule: refusing here fails the deploy instead of the mail.
	if c.SMTP.Mode == smtp.ModeNone && c.Production() {
		return c, fmt.Errorf("SMTP_TLS=none: plaintext SMTP is refused when APP_ENV=production; set SMTP_TLS=starttls or tls")
	}
	if c.Webhook, err = webhook.SettingsFromEnv(lookup); err != nil {
		return c, err
	}
	// Every replica runs the webhook lanes, whose dispatcher refuses
	// leases that break ValidateAttempts anyway: checked here, a
	// LEASE_SLACK too short for a webhook mark stops every command, not
	// only a replica's boot.
	if c.Leases, err = leases.Load(lookup); err == nil {
		err = c.Leases.ValidateAttempts()
	}
	if chain, ok := errors.AsType[*leases.ChainError](err); ok {
		// The chain names the Config's fields; an operator sets variables.
		return c, fmt.Errorf("lease overrides (%s, %s, %s, %s, %s): %w; their ranges: docs/OPERATIONS.md, \"Accepted values\"",
			leases.EnvBatchSize, leases.EnvBatchTimeout, leases.EnvLeaseSlack, leases.EnvBirthLeaseWindow, leases.EnvRetryClaimBatch,
			chain)
	}
	if err != nil {
		return c, err
	}
	if c.Keys, err = outbox.KeyRingFromEnv(lookup); err != nil {
		return c, err
	}
	if c.Events, err = mailevents.SettingsFromEnv(lookup); err != nil {
		return c, err
	}
	if c.OpsEmail = get("OPS_EMAIL", ""); c.OpsEmail != "" {
		if err := opsEmail(c.OpsEmail, webhook.EndpointDisabled{}).Validate(); err != nil {
			return c, fmt.Errorf("OPS_EMAIL=%q: %w", c.OpsEmail, err)
		}
	}
	if c.Tracing, err = telemetry.FromEnv(lookup); err != nil {
		return c, err
	}
	if c.TemplatesDir, err = templatesDirFromEnv(get); err != nil {
		return c, err
	}
	if c.History, err = history.RetentionFromEnv(lookup); err != nil {
		return c, err
	}
	if c.Portal, err = portalsite.SettingsFromEnv(lookup); err != nil {
		return c, err
	}
	if c.API, err = httpapi.SettingsFromEnv(lookup); err != nil {
		return c, err
	}
	return c, nil
}

// fileVars are the secrets that can come from a file instead: NAME_FILE
// names a file holding NAME's value (Docker and Kubernetes secrets), read
// once at start with its trailing newline removed.
var fileVars = []string{"DATABASE_URL", pooling.EnvDirectURL, "SMTP_PASSWORD", "RIVERUI_PASSWORD",
	mailevents.EnvPostmarkPassword, mailevents.EnvGenericSecret, "PORTAL_SIGNING_KEY", "API_KEYS"}

// withFileVars reads the fileVars given as NAME_FILE and returns a lookup
// that answers NAME with the file's content. Setting both NAME and
// NAME_FILE, an unreadable file and an empty one are errors naming the
// variable.
func withFileVars(lookup func(string) (string, bool)) (func(string) (string, bool), error) {
	values := map[string]string{}
	for _, name := range fileVars {
		path, ok := lookup(name + "_FILE")
		if !ok || path == "" {
			continue
		}
		if v, ok := lookup(name); ok && v != "" {
			return nil, fmt.Errorf("%s and %s_FILE are both set: set one", name, name)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s_FILE: %w", name, err)
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			return nil, fmt.Errorf("%s_FILE=%s: the file is empty", name, path)
		}
		values[name] = v
	}
	return func(k string) (string, bool) {
		if v, ok := values[k]; ok {
			return v, true
		}
		return lookup(k)
	}, nil
}

// retryBackoffScale is RETRY_BACKOFF_SCALE's range: a schedule can be
// compressed, never stretched or zeroed.
var retryBackoffScale = setting.Interval{Lo: 0, Hi: 1, LoOpen: true}

// maxEmailConcurrency caps EMAIL_CONCURRENCY: each batch in flight is an
// SMTP connection, and a relay refuses far fewer than this.
const maxEmailConcurrency = 1000

func duration(get func(string, string) string, name, def string) (time.Duration, error) {
	s := get(name, def)
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: must be a positive duration such as %s", name, s, def)
	}
	return d, nil
}

// Env is what every command gets: configuration, a logger and output.
type Env struct {
	Config Config
	Logger *slog.Logger
	Stdout io.Writer
	Stderr io.Writer
	pool   *pgxpool.Pool
	// poolSize is the pool's MaxConns: a replica's (poolsize.Replica), set
	// by run before it connects; 0 is a command's (poolsize.CLI).
	poolSize int
	// lookup is what the configuration was read through: `run` looks in it
	// for variables postbox does not read (unknownVariables), once, at boot.
	lookup func(string) (string, bool)
}

// LoadEnv reads the configuration and sets up logging on stderr: JSON
// with jsonLogs (run and demo, whose logs a collector reads), sentences
// otherwise.
func LoadEnv(lookup func(string) (string, bool), stdout, stderr io.Writer, jsonLogs bool) (*Env, error) {
	cfg, err := LoadConfig(lookup)
	if err != nil {
		return nil, err
	}
	logger := newCLILogger(stderr, cfg.LogLevel)
	if jsonLogs {
		logger = newLogger(stderr, cfg.LogLevel)
	}
	return &Env{Config: cfg, Logger: logger, Stdout: stdout, Stderr: stderr, lookup: lookup}, nil
}

// Pool connects to DATABASE_URL once, with an error naming the host when
// the database does not answer. Its size is a command's, at most
// poolsize.CLIConnections, unless run has set a replica's (docs/OPERATIONS.md,
// "Connections").
func (e *Env) Pool(ctx context.Context) (*pgxpool.Pool, error) {
	if e.pool != nil {
		return e.pool, nil
	}
	if err := pgserver.Ping(ctx, e.Config.DatabaseURL); err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(e.Config.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	size := e.poolSize
	if size == 0 {
		if size, err = poolsize.CLI(e.Config.DatabaseURL); err != nil {
			return nil, err
		}
	}
	cfg.MaxConns = int32(size)
	cfg.MinConns = min(cfg.MinConns, cfg.MaxConns)
	cfg.ConnConfig.DefaultQueryExecMode = e.Config.Pooling.ExecMode
	e.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return e.pool, nil
}

// MigratedPool is Pool plus a check that migrations are current, so no
// command runs against a schema it does not understand.
func (e *Env) MigratedPool(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := e.Pool(ctx)
	if err != nil {
		return nil, err
	}
	m, err := migrations.New(pool, e.Logger)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if err := m.RequireCurrent(ctx); err != nil {
		return nil, err
	}
	return pool, nil
}

// Close releases the pool.
func (e *Env) Close() {
	if e.pool != nil {
		e.pool.Close()
	}
}
