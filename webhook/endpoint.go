package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Endpoint is a receiver of webhooks.
type Endpoint struct {
	ID  string `json:"id"`
	URL string `json:"url"`

	// Description is free text the endpoint's owner writes for itself
	// (the receiving service, whom to call): at most MaxDescriptionBytes.
	Description string `json:"description,omitempty"`

	// Tenant is whose the endpoint is (tenant.go): it receives only that
	// tenant's events. Empty: events without a tenant. Set at creation,
	// never changed.
	Tenant string `json:"tenant,omitempty"`

	// Secret is the Standard Webhooks signing secret. Only CreateEndpoint
	// returns it (once, for the operator to hand to the receiver); listings
	// leave it empty so it is never printed by accident.
	Secret string `json:"secret,omitempty"`

	// EventTypes filters what the endpoint receives; empty means every
	// event type.
	EventTypes []string `json:"event_types"`

	// Enabled endpoints receive new events. An endpoint is disabled by an
	// operator, or automatically when it answers 410 Gone; DisabledReason
	// says which.
	Enabled        bool      `json:"enabled"`
	DisabledReason string    `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`

	// Limits are the pool-wide admission limits (SetLimits).
	Limits

	// SendTraceparent: each attempt carries its span's W3C traceparent
	// header, so the receiver's trace joins postbox's (SetSendTraceparent).
	// Off unless asked for: it is a header the receiver sees.
	SendTraceparent bool `json:"send_traceparent"`

	// OrderOnFailure is what the rest of an ordering key does once one of
	// its deliveries to this endpoint fails for good: OrderBlock (the
	// default) or OrderProceed (SetOrderOnFailure).
	OrderOnFailure string `json:"order_on_failure"`

	// Breaker is the circuit breaker's state (breaker.go), as listed.
	Breaker Breaker `json:"breaker"`
}

// Breaker is an endpoint's circuit breaker as ListEndpoints reads it.
type Breaker struct {
	// State is "closed", "open" (deliveries held until PausedUntil),
	// "probing" (half-open, its probes have gone out), "half-open"
	// (the next claim sends a probe), "recovering" (closed, first
	// attempts in a slow start), "new" (closed, but it has not accepted a
	// delivery yet: at most Settings.Concurrency first attempts out
	// pool-wide) or "closed".
	State               string     `json:"state"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	FailingSince        *time.Time `json:"failing_since,omitempty"`
	PausedUntil         *time.Time `json:"paused_until,omitempty"`
}

// EndpointParams describe a new endpoint.
type EndpointParams struct {
	Tenant          string // whose the endpoint is; empty for none
	URL             string
	Description     string   // at most MaxDescriptionBytes
	EventTypes      []string // empty: every event type
	Secret          string   // empty: NewSecret generates one
	SendTraceparent bool     // attempts carry a traceparent header
}

// CreateEndpoint validates p and inserts an enabled endpoint. cfg.Production
// requires an https URL.
func CreateEndpoint(ctx context.Context, db DB, cfg Settings, p EndpointParams) (Endpoint, error) {
	if err := validateTenant(p.Tenant); err != nil {
		return Endpoint{}, fmt.Errorf("%w: %v", ErrInvalidEndpoint, err)
	}
	if err := ValidateURL(p.URL, cfg.Production); err != nil {
		return Endpoint{}, err
	}
	if err := validateDescription(p.Description); err != nil {
		return Endpoint{}, err
	}
	types, err := normalizeEventTypes(p.EventTypes)
	if err != nil {
		return Endpoint{}, err
	}
	if err := checkSubscriptions(ctx, db, types); err != nil {
		return Endpoint{}, err
	}
	secret := p.Secret
	if secret == "" {
		if secret, err = NewSecret(); err != nil {
			return Endpoint{}, err
		}
	} else if err := ValidateSecret(secret); err != nil {
		return Endpoint{}, err
	}

	e := Endpoint{Tenant: p.Tenant, URL: p.URL, Description: p.Description, Secret: secret, EventTypes: types, Enabled: true,
		SendTraceparent: p.SendTraceparent, OrderOnFailure: OrderBlock}
	err = db.QueryRow(ctx, `INSERT INTO webhook_endpoints (url, secret, event_types, send_traceparent, tenant_id, description)
VALUES ($1, $2, $3, $4, NULLIF($5::text, ''), $6) RETURNING id, created_at, updated_at`, p.URL, secret, types, p.SendTraceparent, p.Tenant, p.Description).
		Scan(&e.ID, &e.CreatedAt, &e.UpdatedAt)
	if err != nil {
		return Endpoint{}, fmt.Errorf("webhook: create endpoint: %w", err)
	}
	return e, nil
}

// endpointColumns are what every endpoint read returns (never the secret);
// scanEndpoint reads them.
const endpointColumns = `id, url, event_types, enabled, coalesce(disabled_reason, ''), created_at, updated_at,
	rate_limit, max_in_flight, consecutive_failures, failing_since, paused_until,
	CASE WHEN paused_until > now() THEN 'open'
		WHEN probing AND paused_until IS NOT NULL THEN 'probing'
		WHEN paused_until IS NOT NULL THEN 'half-open'
		WHEN breaker_recovering THEN 'recovering'
		WHEN proven_at IS NULL THEN 'new'
		ELSE 'closed' END, send_traceparent, order_on_failure, coalesce(tenant_id, ''), description`

func scanEndpoint(row pgx.CollectableRow) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.URL, &e.EventTypes, &e.Enabled, &e.DisabledReason, &e.CreatedAt, &e.UpdatedAt,
		&e.RateLimit, &e.MaxInFlight, &e.Breaker.ConsecutiveFailures, &e.Breaker.FailingSince, &e.Breaker.PausedUntil,
		&e.Breaker.State, &e.SendTraceparent, &e.OrderOnFailure, &e.Tenant, &e.Description)
	return e, err
}

// ListEndpoints returns every endpoint, oldest first, without secrets.
func ListEndpoints(ctx context.Context, db DB) ([]Endpoint, error) {
	return listEndpoints(ctx, db, nil)
}

// listEndpoints lists tenant's endpoints, through the index the fan-out
// reads them by, or every one for nil.
func listEndpoints(ctx context.Context, db DB, tenant *string) ([]Endpoint, error) {
	sql, args := `SELECT `+endpointColumns+` FROM webhook_endpoints ORDER BY created_at, id`, []any(nil)
	if tenant != nil {
		sql, args = `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE coalesce(tenant_id, '') = $1 ORDER BY created_at, id`, []any{*tenant}
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("webhook: list endpoints: %w", err)
	}
	eps, err := pgx.CollectRows(rows, scanEndpoint)
	if err != nil {
		return nil, fmt.Errorf("webhook: list endpoints: %w", err)
	}
	return eps, nil
}

// EndpointUpdate is what UpdateEndpoint changes; a nil field is left as it
// is. The tenant never changes.
type EndpointUpdate struct {
	URL         *string
	Description *string
	EventTypes  *[]string // empty: every event type
}

// UpdateEndpoint changes endpoint id's URL or subscriptions and returns
// it as it now is. A new URL is held to CreateEndpoint's rules; deliveries
// already born go to it from their next attempt on, new subscriptions
// apply from the next fan-out.
func UpdateEndpoint(ctx context.Context, db DB, cfg Settings, id string, u EndpointUpdate) (Endpoint, error) {
	if err := validateID(id); err != nil {
		return Endpoint{}, err
	}
	if u.URL != nil {
		if err := ValidateURL(*u.URL, cfg.Production); err != nil {
			return Endpoint{}, err
		}
	}
	if u.Description != nil {
		if err := validateDescription(*u.Description); err != nil {
			return Endpoint{}, err
		}
	}
	var types []string
	if u.EventTypes != nil {
		var err error
		if types, err = normalizeEventTypes(*u.EventTypes); err != nil {
			return Endpoint{}, err
		}
		if err := checkSubscriptions(ctx, db, types); err != nil {
			return Endpoint{}, err
		}
	}
	rows, _ := db.Query(ctx, `UPDATE webhook_endpoints SET url = coalesce($2, url),
	event_types = CASE WHEN $3 THEN $4::text[] ELSE event_types END, description = coalesce($5, description), updated_at = now()
WHERE id = $1 RETURNING `+endpointColumns, id, u.URL, u.EventTypes != nil, types, u.Description)
	e, err := pgx.CollectExactlyOneRow(rows, scanEndpoint)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return e, fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	case err != nil:
		return e, fmt.Errorf("webhook: update endpoint %s: %w", id, err)
	}
	return e, nil
}

// DeleteEndpoint removes endpoint id with its deliveries and their
// attempt logs: what it was sent is forgotten. A delivery in flight to it
// then marks nothing (a stale mark). DisableEndpoint keeps the history.
func DeleteEndpoint(ctx context.Context, db DB, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("webhook: delete endpoint %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	return nil
}

// CountEndpointDeliveries is how many deliveries endpoint id has, kept
// ones included: what DeleteEndpoint would remove.
func CountEndpointDeliveries(ctx context.Context, db DB, id string) (int, error) {
	if err := validateID(id); err != nil {
		return 0, err
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, id).Scan(&n); err != nil {
		return 0, fmt.Errorf("webhook: count deliveries of endpoint %s: %w", id, err)
	}
	return n, nil
}

// DisableEndpoint stops new events from fanning out to the endpoint.
// Pending deliveries to it are held — the retry claim skips them, spending
// no attempt — and go out once it is enabled again.
func DisableEndpoint(ctx context.Context, db DB, id, reason string) error {
	if reason == "" {
		reason = "disabled by operator"
	}
	return setEnabled(ctx, db, id, false, reason)
}

// EnableEndpoint re-enables an endpoint, clears its disabled reason and
// closes its circuit breaker (a fresh start: the failures that disabled it
// no longer count toward WEBHOOK_DISABLE_AFTER). Its held deliveries are
// due at once.
func EnableEndpoint(ctx context.Context, db DB, id string) error {
	return setEnabled(ctx, db, id, true, "")
}

// setEnabledSQL: enabling resets the breaker (the CASEs), disabling
// leaves it for the listing to show.
const setEnabledSQL = `UPDATE webhook_endpoints
SET enabled = $2, disabled_reason = NULLIF($3, ''), updated_at = now(),
	consecutive_failures = CASE WHEN $2 THEN 0 ELSE consecutive_failures END,
	failing_since = CASE WHEN $2 THEN NULL ELSE failing_since END,
	breaker_opens = CASE WHEN $2 THEN 0 ELSE breaker_opens END,
	paused_until = CASE WHEN $2 THEN NULL ELSE paused_until END,
	probing = CASE WHEN $2 THEN false ELSE probing END
WHERE id = $1`

func setEnabled(ctx context.Context, db DB, id string, enabled bool, reason string) error {
	if err := validateID(id); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, setEnabledSQL, id, enabled, reason)
	if err != nil {
		return fmt.Errorf("webhook: update endpoint %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	return nil
}

// ValidateURL checks that raw is an absolute http or https URL with a host
// and no credentials (they would be stored and listed in clear). When
// production is true only https is accepted.
//
// It does not check where the host resolves: that happens at connect time,
// on every attempt, where DNS rebinding cannot slip past it (see client.go).
func ValidateURL(raw string, production bool) error {
	// Errors quote the URL redacted: its query string or userinfo may be a
	// token, and the error may end up in last_error and the logs.
	shown := redactURL(raw)
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%w: url %q does not parse: %v", ErrInvalidEndpoint, shown, redactedParseError(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: url %q must be absolute http(s)", ErrInvalidEndpoint, shown)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%w: url %q has no host", ErrInvalidEndpoint, shown)
	case u.User != nil:
		return fmt.Errorf("%w: url must not carry credentials; receivers authenticate the signature instead", ErrInvalidEndpoint)
	case u.Fragment != "":
		return fmt.Errorf("%w: url %q must not have a fragment", ErrInvalidEndpoint, shown)
	case production && u.Scheme != "https":
		return fmt.Errorf("%w: url %q must be https when APP_ENV=production", ErrInvalidEndpoint, shown)
	}
	return nil
}

// redactedParseError is url.Parse's reason without the URL it quotes.
func redactedParseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// maxEventTypeLen bounds an event type, which travels in the body's "type".
const maxEventTypeLen = 200

func validateEventType(t string) error {
	if t == "" || len(t) > maxEventTypeLen || strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("event type %q must be 1–%d printable characters without spaces", t, maxEventTypeLen)
	}
	return nil
}

func normalizeEventTypes(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, t := range in {
		t = strings.TrimSpace(t)
		if err := validateEventType(t); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidEndpoint, err)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// MaxDescriptionBytes bounds an endpoint's Description (migration 00032's
// CHECK holds it for plain SQL).
const MaxDescriptionBytes = 4096

// validateDescription names the field, as every endpoint check does.
func validateDescription(d string) error {
	if len(d) > MaxDescriptionBytes || !utf8.ValidString(d) {
		return fmt.Errorf("%w: description must be at most %d bytes of UTF-8 (got %d bytes)", ErrInvalidEndpoint, MaxDescriptionBytes, len(d))
	}
	return nil
}

// validateID refuses a malformed id before Postgres does, with an error a
// CLI user can act on.
func validateID(id string) error {
	var u pgtype.UUID
	if err := u.Scan(id); err != nil {
		return fmt.Errorf("%w: %q is not an id (a UUID)", ErrNotFound, id)
	}
	return nil
}

// Limits are an endpoint's pool-wide admission limits (see throttle.go).
// A nil field means no limit.
type Limits struct {
	// RateLimit is the most requests per second the endpoint is sent,
	// across every replica: in (0, MaxRateLimit].
	RateLimit *float64 `json:"rate_limit,omitempty"`
	// MaxInFlight is the most attempts to the endpoint in flight at once,
	// across every replica: in [1, MaxInFlightLimit].
	MaxInFlight *int `json:"max_in_flight,omitempty"`
}

// Bounds of Limits, as migration 00008's CHECK constraints have them.
const (
	MaxRateLimit     = 10000
	MaxInFlightLimit = 10000
)

// Validate checks the bounds.
func (l Limits) Validate() error {
	if r := l.RateLimit; r != nil && (!(*r > 0) || *r > MaxRateLimit) {
		return fmt.Errorf("%w: rate limit %v must be in (0, %d] requests per second", ErrInvalidEndpoint, *r, MaxRateLimit)
	}
	if m := l.MaxInFlight; m != nil && (*m < 1 || *m > MaxInFlightLimit) {
		return fmt.Errorf("%w: max in flight %d must be in [1, %d]", ErrInvalidEndpoint, *m, MaxInFlightLimit)
	}
	return nil
}

// SetLimits replaces endpoint id's limits; nil fields remove a limit. The
// token bucket starts empty, so a new limit holds from its first second.
func SetLimits(ctx context.Context, db DB, id string, l Limits) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, `UPDATE webhook_endpoints
SET rate_limit = $2, max_in_flight = $3, rl_tokens = 0, rl_at = now(), updated_at = now()
WHERE id = $1`, id, l.RateLimit, l.MaxInFlight)
	if err != nil {
		return fmt.Errorf("webhook: set limits of endpoint %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	return nil
}

// SetSendTraceparent turns endpoint id's traceparent header on or off
// (Endpoint.SendTraceparent) from its next attempt on.
func SetSendTraceparent(ctx context.Context, db DB, id string, on bool) error {
	if err := validateID(id); err != nil {
		return err
	}
	tag, err := db.Exec(ctx, `UPDATE webhook_endpoints SET send_traceparent = $2, updated_at = now() WHERE id = $1`, id, on)
	if err != nil {
		return fmt.Errorf("webhook: set traceparent header of endpoint %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	return nil
}
