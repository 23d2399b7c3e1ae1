package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/tracing"
)

// payloadSizeConstraint is migration 00006's CHECK on webhook_outbox: at
// most DefaultMaxPayloadBytes of JSON text, whoever inserts the row.
const payloadSizeConstraint = "webhook_outbox_payload_size"

// Enqueuer writes events into webhook_outbox inside the application's own
// transaction: the event exists if and only if the transaction commits,
// and the table's insert trigger wakes the workers when it does.
type Enqueuer struct {
	// MaxPayloadBytes refuses larger payloads; zero means
	// DefaultMaxPayloadBytes.
	MaxPayloadBytes int
}

// Event is one event to enqueue.
type Event struct {
	Type    string // e.g. "invoice.paid"
	Payload []byte // valid JSON

	// Tenant, if set, is whose the event is (tenant.go): it reaches only
	// that tenant's endpoints. Empty reaches only endpoints without a
	// tenant. At most MaxTenantBytes, no control characters.
	Tenant string

	// IdempotencyKey, if set, makes the enqueue idempotent: an enqueue
	// with a key some webhook_outbox row of the same Tenant already holds
	// writes nothing and returns that row's id
	// (webhook_outbox_idempotency_idx, unique per tenant). At most
	// MaxIdempotencyKeyBytes. A key is held until the pruner deletes its
	// dispatched row (Settings.OutboxRetention).
	IdempotencyKey string

	// EndpointID, if set, addresses the event to that one endpoint,
	// whatever its event_types filter; empty fans it out to every enabled
	// endpoint of Tenant subscribed to Type. An endpoint of another tenant
	// is refused.
	EndpointID string

	// SendAt, if set, holds the event until then: the row's due time
	// (next_attempt_at), when it is fanned out. Zero or a time already
	// past means now; more than MaxSendAhead ahead is refused. Cancel
	// withdraws it meanwhile.
	SendAt time.Time

	// OrderingKey, if set, orders the event among the others of the same
	// key (a customer, an invoice): each endpoint is sent them in the
	// order they were enqueued, none while an earlier one is pending —
	// waiting for its first attempt, in flight, or waiting for a retry
	// (see docs/design/outbox-transport.md, Ordered delivery). Events of
	// different keys, and unordered events, do not wait for each other.
	// At most MaxOrderingKeyBytes, as webhook_outbox's CHECK
	// webhook_outbox_ordering_key_format holds for plain SQL.
	OrderingKey string
}

// MaxOrderingKeyBytes bounds Event.OrderingKey.
const MaxOrderingKeyBytes = 255

// MaxIdempotencyKeyBytes bounds Event.IdempotencyKey, as migration 00008's
// CHECK webhook_outbox_idempotency_key_format does for plain SQL.
const MaxIdempotencyKeyBytes = 255

// enqueueSQL inserts the row, or nothing when its idempotency key is taken;
// enqueueExistingSQL then reads the row that holds it. ON CONFLICT waits
// for a concurrent transaction inserting the same key: once it commits,
// the next statement's fresh READ COMMITTED snapshot sees its row; if it
// rolls back, this insert goes ahead. Under REPEATABLE READ the conflict
// with a row the snapshot cannot see is a serialization failure (40001),
// returned as is.
//
// The INSERT also reads the schema its event type has now (schema.go):
// the payload was checked against the schema this process last saw, and
// if that is not the one the statement read, it is checked again and the
// row deleted, in the same transaction, when it fails.
const (
	enqueueSQL = `INSERT INTO webhook_outbox (event_type, payload, idempotency_key, endpoint_id, traceparent, next_attempt_at, ordering_key, tenant_id)
VALUES ($1, $2, NULLIF($3::text, ''), NULLIF($5::text, '')::uuid, NULLIF($6::text, ''), greatest(coalesce($4::timestamptz, now()), now()), NULLIF($7::text, ''), NULLIF($8::text, ''))
ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, ` + typeDigestSQL
	enqueueExistingSQL = `SELECT id FROM webhook_outbox WHERE idempotency_key = $1 AND coalesce(tenant_id, '') = $2`
	// typeDigestSQL is the schema digest of event type $1 now, '' for none.
	typeDigestSQL = `coalesce((SELECT schema_digest FROM webhook_event_types WHERE name = $1), '')`
)

// Enqueue inserts one event into webhook_outbox using tx. The payload must
// be valid JSON no larger than the limit. It returns the outbox row's id,
// which the fan-out gives the event: the webhook-id receivers see.
func (e Enqueuer) Enqueue(ctx context.Context, tx pgx.Tx, eventType string, payload []byte) (string, error) {
	return e.EnqueueEvent(ctx, tx, Event{Type: eventType, Payload: payload})
}

// EnqueueEvent inserts ev into webhook_outbox using tx and returns the
// outbox row's id — with an IdempotencyKey already held, the holder's id,
// and nothing is written. That id is the webhook-id receivers see: the
// fan-out gives the event its row's id. The trace context of ctx's span,
// if any, is recorded with the row; the fan-out and every attempt join
// that trace.
func (e Enqueuer) EnqueueEvent(ctx context.Context, tx pgx.Tx, ev Event) (string, error) {
	eventType, payload := ev.Type, ev.Payload
	limit := e.MaxPayloadBytes
	if limit <= 0 {
		limit = DefaultMaxPayloadBytes
	}
	if err := validateEventType(eventType); err != nil {
		return "", fmt.Errorf("webhook: enqueue: %w", err)
	}
	if len(payload) > limit {
		return "", fmt.Errorf("%w: %d bytes, over the limit of %d bytes (%s)",
			ErrPayloadTooLarge, len(payload), limit, EnvMaxPayloadBytes)
	}
	if !json.Valid(payload) {
		return "", ErrInvalidPayload
	}
	if len(ev.IdempotencyKey) > MaxIdempotencyKeyBytes {
		return "", fmt.Errorf("%w: idempotency key is over %d bytes", ErrInvalidEvent, MaxIdempotencyKeyBytes)
	}
	if len(ev.OrderingKey) > MaxOrderingKeyBytes {
		return "", fmt.Errorf("%w: ordering key is over %d bytes", ErrInvalidEvent, MaxOrderingKeyBytes)
	}
	if err := validateTenant(ev.Tenant); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if ev.EndpointID != "" {
		if err := validateID(ev.EndpointID); err != nil {
			return "", err
		}
		if err := checkAddressee(ctx, tx, ev.Tenant, ev.EndpointID); err != nil {
			return "", err
		}
	}

	// A past SendAt is now (the statement's greatest): a row is never
	// written behind the claim window, where only the sweep finds it.
	var sendAt any
	if !ev.SendAt.IsZero() {
		if ev.SendAt.After(time.Now().Add(MaxSendAhead)) {
			return "", fmt.Errorf("%w: send_at %s is more than a year ahead (MaxSendAhead)", ErrInvalidEvent, ev.SendAt.UTC().Format(time.RFC3339))
		}
		sendAt = ev.SendAt
	}
	checked, err := checkSchema(ctx, tx, eventType, payload)
	if err != nil {
		return "", err
	}
	var id, digest string
	err = tx.QueryRow(ctx, enqueueSQL, eventType, string(payload), ev.IdempotencyKey, sendAt, ev.EndpointID, tracing.Traceparent(ctx), ev.OrderingKey, ev.Tenant).Scan(&id, &digest)
	if err == nil && digest != checked {
		// The catalog changed since this process last read the type.
		schemas.saw(eventType, digest)
		if err := schemas.check(ctx, tx, eventType, digest, payload); err != nil {
			if !errors.Is(err, ErrPayloadSchema) {
				err = fmt.Errorf("webhook: enqueue %s: %w", eventType, err)
			}
			if _, derr := tx.Exec(ctx, `DELETE FROM webhook_outbox WHERE id = $1`, id); derr != nil {
				return "", fmt.Errorf("%w (and removing the row failed: %v)", err, derr)
			}
			return "", err
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// The key is taken: the existing row is the enqueue.
		if err := tx.QueryRow(ctx, enqueueExistingSQL, ev.IdempotencyKey, ev.Tenant).Scan(&id); err != nil {
			return "", fmt.Errorf("webhook: enqueue %s: read the row holding the idempotency key: %w", eventType, err)
		}
		return id, nil
	}
	if err != nil {
		if claim.IsCheckViolation(err, payloadSizeConstraint) {
			// The stored JSON text (jsonb prints ", " and ": ") is over
			// the limit though the bytes given were not.
			return "", fmt.Errorf("%w: %d bytes, stored as JSON text over the limit of %d bytes (constraint %s)",
				ErrPayloadTooLarge, len(payload), DefaultMaxPayloadBytes, payloadSizeConstraint)
		}
		return "", fmt.Errorf("webhook: enqueue %s: %w", eventType, err)
	}
	return id, nil
}

// checkSchema checks payload against the schema this process last saw for
// its type, and returns that schema's digest ("" none). A payload that
// fails is refused only once the catalog, read again, says the schema is
// still the one it failed.
func checkSchema(ctx context.Context, tx pgx.Tx, eventType string, payload []byte) (string, error) {
	digest := schemas.guess(eventType)
	err := schemas.check(ctx, tx, eventType, digest, payload)
	if err == nil {
		return digest, nil
	}
	if !errors.Is(err, ErrPayloadSchema) && !errors.Is(err, errSchemaGone) {
		return "", fmt.Errorf("webhook: enqueue %s: %w", eventType, err)
	}
	if err := tx.QueryRow(ctx, `SELECT `+typeDigestSQL, eventType).Scan(&digest); err != nil {
		return "", fmt.Errorf("webhook: enqueue %s: read its event type: %w", eventType, err)
	}
	schemas.saw(eventType, digest)
	if err := schemas.check(ctx, tx, eventType, digest, payload); err != nil {
		if errors.Is(err, ErrPayloadSchema) {
			return "", err
		}
		return "", fmt.Errorf("webhook: enqueue %s: %w", eventType, err)
	}
	return digest, nil
}

// Enqueue inserts one event into webhook_outbox using tx, with the default
// payload limit.
//
// Other languages enqueue the same way with plain SQL:
//
//	INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{"id": "in_1"}');
//
// for a tenant's endpoints:
//
//	INSERT INTO webhook_outbox (tenant_id, event_type, payload) VALUES ('acme', 'invoice.paid', '{"id": "in_1"}');
//
// and idempotently, with a key (unique per tenant):
//
//	INSERT INTO webhook_outbox (tenant_id, event_type, payload, idempotency_key)
//	VALUES ('acme', 'invoice.paid', '{"id": "in_1"}', 'in_1.paid')
//	ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
func Enqueue(ctx context.Context, tx pgx.Tx, eventType string, payload []byte) (string, error) {
	return Enqueuer{}.Enqueue(ctx, tx, eventType, payload)
}
