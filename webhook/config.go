package webhook

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/postbox/postbox/internal/engine/history"
)

// Defaults for Settings. Each is what a newcomer gets with no environment.
const (
	// DefaultOutboxRetention is how long a dispatched webhook_outbox row is
	// kept before the pruner deletes it. A dispatched row is pure transport
	// intent — webhook_events and webhook_deliveries are the replayable
	// record (see docs/design/outbox-transport.md, Retention) — so a week is
	// only a debugging aid: it lets an operator match an event to the row
	// that produced it.
	DefaultOutboxRetention = 7 * 24 * time.Hour

	// DefaultMaxPayloadBytes bounds an event payload at enqueue. It is sent
	// to every subscribed endpoint on every attempt, so it stays modest.
	// It is also the ceiling: webhook_outbox's CHECK constraint (migration
	// 00006) holds plain SQL to the same number of bytes of JSON text, and
	// WEBHOOK_MAX_PAYLOAD_BYTES can only lower it.
	DefaultMaxPayloadBytes = 256 << 10

	// DefaultConcurrency bounds the HTTP attempts one process runs at once.
	DefaultConcurrency = 32

	// DefaultUserAgent is sent with every delivery.
	DefaultUserAgent = "postbox-webhook/1"

	// Circuit breaker defaults: an endpoint opens once at least
	// DefaultBreakerFailureRate percent of at least
	// DefaultBreakerMinRequests attempts in a DefaultBreakerWindow failed;
	// its deliveries pause for DefaultBreakerCooldown, doubling with every
	// reopening up to DefaultBreakerMaxCooldown; half-open, it closes after
	// DefaultBreakerProbes successful probes. An endpoint failing for
	// DefaultDisableAfter without a success is disabled (Svix's figure).
	//
	// The rate is high on purpose: an endpoint that answers one request in
	// two is alive, and its retries deliver; pausing it would only delay
	// them. The minimum stays under DefaultConcurrency, so a dead endpoint
	// gets no more than one process's worth of attempts before it opens.
	DefaultBreakerFailureRate = 80
	DefaultBreakerMinRequests = 20
	DefaultBreakerWindow      = time.Minute
	DefaultBreakerProbes      = 5
	DefaultBreakerCooldown    = 30 * time.Second
	DefaultBreakerMaxCooldown = time.Hour
	DefaultDisableAfter       = 5 * 24 * time.Hour
)

// Bounds of the breaker's settings from the environment: a rate is a
// percent; a minimum or a probe count past these, or a window past a day,
// is a typo rather than a policy. A minimum of 1000000 is how to switch
// the breaker off.
const (
	maxBreakerFailureRate = 100
	maxBreakerMinRequests = 1000000
	maxBreakerProbes      = 1000
	maxBreakerWindow      = 24 * time.Hour
)

// Environment variables read by SettingsFromEnv.
const (
	EnvAllowedCIDRs    = "WEBHOOK_ALLOWED_CIDRS"     // comma-separated CIDRs the SSRF guard admits
	EnvOutboxRetention = "WEBHOOK_OUTBOX_RETENTION"  // e.g. 168h or 7d
	EnvMaxPayloadBytes = "WEBHOOK_MAX_PAYLOAD_BYTES" // e.g. 262144
	EnvConcurrency     = "WEBHOOK_CONCURRENCY"       // in-process HTTP attempts at once
	EnvUserAgent       = "WEBHOOK_USER_AGENT"
	EnvAppEnv          = "APP_ENV" // production requires https endpoints

	EnvBreakerFailureRate = "WEBHOOK_BREAKER_FAILURE_RATE" // percent of a window's attempts failed that opens the breaker, 1-100
	EnvBreakerMinRequests = "WEBHOOK_BREAKER_MIN_REQUESTS" // attempts a window needs before its rate counts
	EnvBreakerWindow      = "WEBHOOK_BREAKER_WINDOW"       // e.g. 1m
	EnvBreakerProbes      = "WEBHOOK_BREAKER_PROBES"       // successful probes that close it
	EnvBreakerCooldown    = "WEBHOOK_BREAKER_COOLDOWN"     // first cool-down, e.g. 30s
	EnvBreakerMaxCooldown = "WEBHOOK_BREAKER_MAX_COOLDOWN" // cool-down cap, e.g. 1h
	EnvDisableAfter       = "WEBHOOK_DISABLE_AFTER"        // e.g. 5d or 120h
	EnvOpsEndpointID      = "OPS_WEBHOOK_ENDPOINT_ID"      // endpoint told of auto-disables

	// envBreakerFailures was the streak that opened the breaker; it is
	// refused, not ignored, so a deployment that sets it learns of the
	// change at boot.
	envBreakerFailures = "WEBHOOK_BREAKER_FAILURES"
)

// Settings is the webhook side's runtime configuration. Lease figures live in
// leases.Config; these are the knobs that are not about timing.
type Settings struct {
	// AllowedCIDRs admits addresses the SSRF guard would otherwise refuse
	// (loopback, private, link-local…). Empty in production, normally; tests
	// and local setups admit 127.0.0.0/8 to reach their receivers.
	AllowedCIDRs []netip.Prefix

	// OutboxRetention is the age past which the pruner deletes dispatched
	// webhook_outbox rows. Zero means DefaultOutboxRetention.
	OutboxRetention time.Duration

	// MaxPayloadBytes is the largest payload Enqueue accepts. Zero means
	// DefaultMaxPayloadBytes.
	MaxPayloadBytes int

	// Concurrency bounds the HTTP attempts in flight in one process. Zero
	// means DefaultConcurrency. It is also, pool-wide, how many first
	// attempts an endpoint that has never accepted a delivery may have
	// unresolved (bornSQL, bucket.admit).
	Concurrency int

	// Production requires https endpoint URLs (APP_ENV=production), both
	// when an endpoint is created and when a delivery is attempted.
	Production bool

	// UserAgent is sent with every delivery. Empty means DefaultUserAgent.
	UserAgent string

	// BreakerFailureRate is the percent (1-100) of an endpoint's attempts
	// in BreakerWindow that, once failed, open its circuit breaker (or,
	// half-open, reopen it). Zero means DefaultBreakerFailureRate.
	BreakerFailureRate int

	// BreakerMinRequests is how many attempts a window needs before its
	// failure rate opens the breaker: fewer never do. Zero means
	// DefaultBreakerMinRequests.
	BreakerMinRequests int

	// BreakerWindow is how long the window that the rate is counted over
	// runs from its first failure. Zero means DefaultBreakerWindow.
	BreakerWindow time.Duration

	// BreakerProbes is how many successful probes close a half-open
	// breaker; it admits one probe, and one more at once per success.
	// Zero means DefaultBreakerProbes.
	BreakerProbes int

	// BreakerCooldown is the first pause of an open breaker, doubled after
	// each reopening up to BreakerMaxCooldown. Zero means the defaults.
	BreakerCooldown, BreakerMaxCooldown time.Duration

	// DisableAfter is how long an endpoint may fail without one success
	// before it is disabled. Zero means DefaultDisableAfter.
	DisableAfter time.Duration

	// OpsEndpointID, if set, is the operator endpoint, one without a
	// tenant: it is sent the operational events (opsevents.go) —
	// endpoint.disabled, endpoint.recovered, delivery.exhausted — about
	// every other endpoint.
	OpsEndpointID string
}

// DefaultSettings returns the configuration a worker runs with when the
// environment sets nothing.
func DefaultSettings() Settings {
	return Settings{
		OutboxRetention: DefaultOutboxRetention,
		MaxPayloadBytes: DefaultMaxPayloadBytes,
		Concurrency:     DefaultConcurrency,
		UserAgent:       DefaultUserAgent,

		BreakerFailureRate: DefaultBreakerFailureRate,
		BreakerMinRequests: DefaultBreakerMinRequests,
		BreakerWindow:      DefaultBreakerWindow,
		BreakerProbes:      DefaultBreakerProbes,
		BreakerCooldown:    DefaultBreakerCooldown,
		BreakerMaxCooldown: DefaultBreakerMaxCooldown,
		DisableAfter:       DefaultDisableAfter,
	}
}

// withDefaults fills zero fields, so a Settings literal naming only what it
// cares about is valid.
func (c Settings) withDefaults() Settings {
	d := DefaultSettings()
	if c.OutboxRetention == 0 {
		c.OutboxRetention = d.OutboxRetention
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = d.MaxPayloadBytes
	}
	if c.Concurrency == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.UserAgent == "" {
		c.UserAgent = d.UserAgent
	}
	if c.BreakerFailureRate == 0 {
		c.BreakerFailureRate = d.BreakerFailureRate
	}
	if c.BreakerMinRequests == 0 {
		c.BreakerMinRequests = d.BreakerMinRequests
	}
	if c.BreakerWindow == 0 {
		c.BreakerWindow = d.BreakerWindow
	}
	if c.BreakerProbes == 0 {
		c.BreakerProbes = d.BreakerProbes
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = d.BreakerCooldown
	}
	if c.BreakerMaxCooldown == 0 {
		c.BreakerMaxCooldown = d.BreakerMaxCooldown
	}
	if c.DisableAfter == 0 {
		c.DisableAfter = d.DisableAfter
	}
	return c
}

// SettingsFromEnv reads the webhook configuration through lookup
// (os.LookupEnv in production). A value that does not parse is an error
// naming its variable, never a silent fallback.
func SettingsFromEnv(lookup func(string) (string, bool)) (Settings, error) {
	c := DefaultSettings()
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}

	if s, ok := get(EnvAllowedCIDRs); ok {
		cidrs, err := ParseCIDRs(s)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvAllowedCIDRs, s, err)
		}
		c.AllowedCIDRs = cidrs
	}
	if s, ok := get(EnvOutboxRetention); ok {
		d, err := history.ParseRetention(s)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvOutboxRetention, s, err)
		}
		c.OutboxRetention = d
	}
	if s, ok := get(envBreakerFailures); ok {
		return c, fmt.Errorf("%s=%q: no longer read: the breaker opens on a failure rate (%s, %s, %s)",
			envBreakerFailures, s, EnvBreakerFailureRate, EnvBreakerMinRequests, EnvBreakerWindow)
	}
	ints := []struct {
		name string
		dst  *int
		max  int // 0: no bound but the type's
	}{
		{EnvMaxPayloadBytes, &c.MaxPayloadBytes, 0}, {EnvConcurrency, &c.Concurrency, 0},
		{EnvBreakerFailureRate, &c.BreakerFailureRate, maxBreakerFailureRate},
		{EnvBreakerMinRequests, &c.BreakerMinRequests, maxBreakerMinRequests},
		{EnvBreakerProbes, &c.BreakerProbes, maxBreakerProbes},
	}
	for _, v := range ints {
		if s, ok := get(v.name); ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return c, fmt.Errorf("%s=%q: must be a positive integer", v.name, s)
			}
			if v.max > 0 && n > v.max {
				return c, fmt.Errorf("%s=%d: must be in 1..%d", v.name, n, v.max)
			}
			*v.dst = n
		}
	}
	if c.MaxPayloadBytes > DefaultMaxPayloadBytes {
		// webhook_outbox's CHECK (migration 00006) refuses more, for plain
		// SQL and Enqueue alike: the setting can lower the limit only.
		return c, fmt.Errorf("%s=%d: must be in 1..%d (the webhook_outbox_payload_size constraint's limit)",
			EnvMaxPayloadBytes, c.MaxPayloadBytes, DefaultMaxPayloadBytes)
	}
	if s, ok := get(EnvUserAgent); ok {
		if err := checkUserAgent(s); err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvUserAgent, s, err)
		}
		c.UserAgent = s
	}
	durations := []struct {
		name string
		dst  *time.Duration
	}{{EnvBreakerWindow, &c.BreakerWindow}, {EnvBreakerCooldown, &c.BreakerCooldown}, {EnvBreakerMaxCooldown, &c.BreakerMaxCooldown}, {EnvDisableAfter, &c.DisableAfter}}
	for _, v := range durations {
		if s, ok := get(v.name); ok {
			d, err := history.ParseRetention(s)
			if err != nil {
				return c, fmt.Errorf("%s=%q: %w", v.name, s, err)
			}
			*v.dst = d
		}
	}
	if c.BreakerWindow < time.Second || c.BreakerWindow > maxBreakerWindow {
		return c, fmt.Errorf("%s=%s: must be in 1s..%s", EnvBreakerWindow, c.BreakerWindow, maxBreakerWindow)
	}
	if c.BreakerMaxCooldown < c.BreakerCooldown {
		return c, fmt.Errorf("%s=%s: must be at least %s=%s", EnvBreakerMaxCooldown, c.BreakerMaxCooldown, EnvBreakerCooldown, c.BreakerCooldown)
	}
	if s, ok := get(EnvOpsEndpointID); ok {
		if err := validateID(s); err != nil {
			return c, fmt.Errorf("%s=%q: must be an endpoint id (a UUID)", EnvOpsEndpointID, s)
		}
		c.OpsEndpointID = s
	}
	if s, ok := get(EnvAppEnv); ok {
		c.Production = s == "production"
	}
	return c, nil
}

// ParseCIDRs parses a comma-separated list such as "127.0.0.0/8, ::1/128".
// A bare address is read as a single-address prefix.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			addr, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address", part)
			}
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8", part)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// PoolConnections is how many pool connections a Dispatcher keeps busy at
// once in steady work, whatever its Concurrency: the fan-out claim and its
// transaction, the attempts' marks (Mark and the breaker's
// count, one short statement each, queued rather than held while the
// HTTP request runs), and the leader's retry pass. Nothing holds one
// connection while it waits for a second.
const PoolConnections = 3

// checkUserAgent refuses a User-Agent net/http would refuse to send: a
// control character (a CR or LF above all) fails every request, so a
// worker that booted with one would fail every delivery instead.
func checkUserAgent(s string) error {
	if !httpguts.ValidHeaderFieldValue(s) {
		return fmt.Errorf("must be a header value without control characters (CR, LF, NUL…)")
	}
	return nil
}
