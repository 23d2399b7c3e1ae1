package webhook

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// TenantScope is one tenant's part of the webhook tables: what a
// customer's portal, an API key of that customer, or `worker … --tenant`
// may reach. Each call reads and changes that tenant's rows only; an id of
// another tenant's row is ErrNotFound, worded as for an id no row has, so
// a caller learns nothing of other tenants' rows.
//
// Each call that takes an id checks the tenant owns it, then does what
// the operator's function of the same name does. Check and act are two
// statements, which is safe because nothing they read changes: an
// endpoint's tenant is fixed when it is created (migration 00030 refuses
// a change), an event's tenant and a delivery's endpoint with them, and
// ids are never reused.
type TenantScope struct{ tenant string }

// ForTenant is tenant's scope. tenant must be a valid tenant, not empty:
// rows without a tenant are the operator's.
func ForTenant(tenant string) (TenantScope, error) {
	if tenant == "" {
		return TenantScope{}, fmt.Errorf("%w: a tenant scope needs a tenant", ErrInvalidEndpoint)
	}
	if err := validateTenant(tenant); err != nil {
		return TenantScope{}, fmt.Errorf("%w: %v", ErrInvalidEndpoint, err)
	}
	return TenantScope{tenant: tenant}, nil
}

// Tenant is the scope's tenant.
func (s TenantScope) Tenant() string { return s.tenant }

// ownedSQL tests, for each kind of id a scoped call takes, that row $1
// is tenant $2's.
var ownedSQL = map[string]string{
	"endpoint": `SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE id = $1 AND tenant_id = $2)`,
	"event":    `SELECT EXISTS (SELECT 1 FROM webhook_events WHERE id = $1 AND tenant_id = $2)`,
	"delivery": `SELECT EXISTS (SELECT 1 FROM webhook_deliveries d JOIN webhook_endpoints p ON p.id = d.endpoint_id
		WHERE d.id = $1 AND p.tenant_id = $2)`,
}

// owns returns nil when the kind's row id is the scope's tenant's, and
// ErrNotFound, as for a missing row, otherwise.
func (s TenantScope) owns(ctx context.Context, db DB, kind, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	var ok bool
	if err := db.QueryRow(ctx, ownedSQL[kind], id, s.tenant).Scan(&ok); err != nil {
		return fmt.Errorf("webhook: read %s %s: %w", kind, id, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s %s", ErrNotFound, kind, id)
	}
	return nil
}

// CreateEndpoint creates an endpoint of the tenant (CreateEndpoint);
// p.Tenant must be empty or the scope's.
func (s TenantScope) CreateEndpoint(ctx context.Context, db DB, cfg Settings, p EndpointParams) (Endpoint, error) {
	if p.Tenant != "" && p.Tenant != s.tenant {
		return Endpoint{}, fmt.Errorf("%w: tenant %q's scope cannot create an endpoint of tenant %q", ErrInvalidEndpoint, s.tenant, p.Tenant)
	}
	p.Tenant = s.tenant
	return CreateEndpoint(ctx, db, cfg, p)
}

// ListEndpoints returns the tenant's endpoints, oldest first, without
// secrets.
func (s TenantScope) ListEndpoints(ctx context.Context, db DB) ([]Endpoint, error) {
	return listEndpoints(ctx, db, &s.tenant)
}

// GetEndpoint returns one of the tenant's endpoints (GetEndpoint).
func (s TenantScope) GetEndpoint(ctx context.Context, db DB, id string) (Endpoint, error) {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return Endpoint{}, err
	}
	return GetEndpoint(ctx, db, id)
}

// UpdateEndpoint changes one of the tenant's endpoints (UpdateEndpoint).
func (s TenantScope) UpdateEndpoint(ctx context.Context, db DB, cfg Settings, id string, u EndpointUpdate) (Endpoint, error) {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return Endpoint{}, err
	}
	return UpdateEndpoint(ctx, db, cfg, id, u)
}

// DisableEndpoint disables one of the tenant's endpoints (DisableEndpoint).
func (s TenantScope) DisableEndpoint(ctx context.Context, db DB, id, reason string) error {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return err
	}
	return DisableEndpoint(ctx, db, id, reason)
}

// EnableEndpoint enables one of the tenant's endpoints (EnableEndpoint).
func (s TenantScope) EnableEndpoint(ctx context.Context, db DB, id string) error {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return err
	}
	return EnableEndpoint(ctx, db, id)
}

// DeleteEndpoint deletes one of the tenant's endpoints (DeleteEndpoint).
func (s TenantScope) DeleteEndpoint(ctx context.Context, db DB, id string) error {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return err
	}
	return DeleteEndpoint(ctx, db, id)
}

// RotateSecret rotates the secret of one of the tenant's endpoints
// (RotateSecret).
func (s TenantScope) RotateSecret(ctx context.Context, db DB, id, secret string, keep time.Duration) (Rotation, error) {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return Rotation{}, err
	}
	return RotateSecret(ctx, db, id, secret, keep)
}

// EndpointSecret returns the signing secret of one of the tenant's
// endpoints (EndpointSecret).
func (s TenantScope) EndpointSecret(ctx context.Context, db DB, id string) (string, error) {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return "", err
	}
	return EndpointSecret(ctx, db, id)
}

// EndpointHealth reads the health of one of the tenant's endpoints
// (EndpointHealth).
func (s TenantScope) EndpointHealth(ctx context.Context, db DB, id string) (Health, error) {
	if err := s.owns(ctx, db, "endpoint", id); err != nil {
		return Health{}, err
	}
	return EndpointHealth(ctx, db, id)
}

// TestEventType is the type of a test event when the catalog has no
// example of the type asked for: a small payload that says what it is.
const TestEventType = "postbox.test"

// testPayload is TestEventType's payload.
const testPayload = `{"test":true,"message":"A test event sent from the webhook portal or API."}`

// SendTestEvent enqueues, in tx, a test event of eventType addressed to
// one of the tenant's endpoints alone: the catalog's example of the type,
// or TestEventType's payload. It goes out as any event does; the result
// is its webhook_outbox row's id.
func (s TenantScope) SendTestEvent(ctx context.Context, tx pgx.Tx, cfg Settings, endpointID, eventType string) (string, error) {
	if err := s.owns(ctx, tx, "endpoint", endpointID); err != nil {
		return "", err
	}
	payload := []byte(testPayload)
	if eventType != TestEventType {
		types, err := ListEventTypes(ctx, tx)
		if err != nil {
			return "", err
		}
		i := slices.IndexFunc(types, func(t EventType) bool { return t.Name == eventType && len(t.Example) > 0 })
		if i < 0 {
			return "", fmt.Errorf("%w: event type %q has no example in the catalog to send (%s always has one)", ErrInvalidEvent, eventType, TestEventType)
		}
		payload = types[i].Example
	}
	return Enqueuer{MaxPayloadBytes: cfg.MaxPayloadBytes}.EnqueueEvent(ctx, tx, Event{Tenant: s.tenant, Type: eventType, Payload: payload, EndpointID: endpointID})
}

// GetEvent returns one of the tenant's events with its deliveries
// (GetEvent).
func (s TenantScope) GetEvent(ctx context.Context, db DB, id string) (EventRecord, error) {
	if err := s.owns(ctx, db, "event", id); err != nil {
		return EventRecord{}, err
	}
	return GetEvent(ctx, db, id)
}

// GetDelivery returns one of the tenant's deliveries with its attempt
// log (GetDelivery).
func (s TenantScope) GetDelivery(ctx context.Context, db DB, id string) (DeliveryRecord, error) {
	if err := s.owns(ctx, db, "delivery", id); err != nil {
		return DeliveryRecord{}, err
	}
	return GetDelivery(ctx, db, id)
}

// DeliveryQuery narrows ListDeliveries.
type DeliveryQuery struct {
	EndpointID string         // one of the tenant's endpoints; empty: all of them
	Status     DeliveryStatus // empty: any
	EventType  string         // empty: any
	Since      time.Time      // created at or after; zero: any time
	// Before, one of the tenant's deliveries, asks for the page after it:
	// the deliveries created before it (the last of a page is the cursor
	// of the next). Empty: the newest.
	Before string
	Limit  int // at most; 0 means 100
}

// maxListedDeliveries bounds DeliveryQuery.Limit.
const maxListedDeliveries = 1000

// ListDeliveries returns the tenant's deliveries, newest first, without
// attempt logs (GetDelivery has them).
func (s TenantScope) ListDeliveries(ctx context.Context, db DB, q DeliveryQuery) ([]DeliveryRecord, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.Limit > maxListedDeliveries {
		return nil, fmt.Errorf("%w: limit %d is over %d", ErrInvalidEndpoint, q.Limit, maxListedDeliveries)
	}
	var endpoint *string
	if q.EndpointID != "" {
		if err := s.owns(ctx, db, "endpoint", q.EndpointID); err != nil {
			return nil, err
		}
		endpoint = &q.EndpointID
	}
	var status *string
	switch q.Status {
	case "":
	case StatusPending, StatusSucceeded, StatusFailed:
		st := string(q.Status)
		status = &st
	default:
		return nil, fmt.Errorf("%w: status %q is not pending, succeeded or failed", ErrInvalidEndpoint, q.Status)
	}
	var before, eventType *string
	if q.Before != "" {
		if err := s.owns(ctx, db, "delivery", q.Before); err != nil {
			return nil, err
		}
		before = &q.Before
	}
	if q.EventType != "" {
		eventType = &q.EventType
	}
	var since *time.Time
	if !q.Since.IsZero() {
		since = &q.Since
	}
	rows, err := db.Query(ctx, `SELECT `+deliveryColumns+deliveryFrom+`
WHERE p.tenant_id = $1 AND ($2::uuid IS NULL OR d.endpoint_id = $2) AND ($3::text IS NULL OR d.status = $3)
	AND ($5::text IS NULL OR e.event_type = $5) AND ($6::timestamptz IS NULL OR d.created_at >= $6)
	AND ($7::uuid IS NULL OR (d.created_at, d.id) < (SELECT b.created_at, b.id FROM webhook_deliveries b WHERE b.id = $7))
ORDER BY d.created_at DESC, d.id DESC LIMIT $4`, s.tenant, endpoint, status, q.Limit, eventType, since, before)
	if err != nil {
		return nil, fmt.Errorf("webhook: list deliveries of tenant %q: %w", s.tenant, err)
	}
	ds, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("webhook: list deliveries of tenant %q: %w", s.tenant, err)
	}
	return ds, nil
}

// ReplayTargets lists the endpoints a replay of one of the tenant's
// events would reach (ReplayTargets): the tenant's only.
func (s TenantScope) ReplayTargets(ctx context.Context, db DB, eventID string) ([]Endpoint, error) {
	if err := s.owns(ctx, db, "event", eventID); err != nil {
		return nil, err
	}
	return ReplayTargets(ctx, db, eventID)
}

// ReplayEvent replays one of the tenant's events where it went
// (Dispatcher.ReplayEvent).
func (s TenantScope) ReplayEvent(ctx context.Context, p *Dispatcher, eventID string) (Replay, error) {
	if err := s.owns(ctx, p.pool, "event", eventID); err != nil {
		return Replay{}, err
	}
	return p.ReplayEvent(ctx, eventID)
}

// ReplayFailedSince replays to one of the tenant's endpoints what failed
// to reach it since since (Dispatcher.ReplayFailedSince).
func (s TenantScope) ReplayFailedSince(ctx context.Context, p *Dispatcher, endpointID string, since time.Time) (ReplayBatch, error) {
	if err := s.owns(ctx, p.pool, "endpoint", endpointID); err != nil {
		return ReplayBatch{}, err
	}
	return p.ReplayFailedSince(ctx, endpointID, since)
}

// RecoverSince replays, to each of the tenant's enabled endpoints, the
// events whose delivery to it failed at or after since and that it never
// got (Dispatcher.ReplayFailedSince), and adds up what was done. A
// disabled endpoint is passed over: it would hold what it was sent.
func (s TenantScope) RecoverSince(ctx context.Context, p *Dispatcher, since time.Time) (ReplayBatch, error) {
	eps, err := s.ListEndpoints(ctx, p.pool)
	if err != nil {
		return ReplayBatch{}, err
	}
	var total ReplayBatch
	for _, ep := range eps {
		if !ep.Enabled {
			continue
		}
		rb, err := p.ReplayFailedSince(ctx, ep.ID, since)
		total.Events += rb.Events
		total.Resumed += rb.Resumed
		total.Deliveries += rb.Deliveries
		total.Attempts.Add(rb.Attempts)
		if err != nil {
			return total, fmt.Errorf("webhook: recover tenant %q since %s: %w", s.tenant, since.UTC().Format(time.RFC3339), err)
		}
	}
	return total, nil
}
