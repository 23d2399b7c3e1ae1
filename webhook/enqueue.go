package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// payloadSizeConstraint is migration 00006's CHECK on webhook_outbox: at
// most DefaultMaxPayloadBytes of JSON text, whoever inserts the row.
const payloadSizeConstraint = "webhook_outbox_payload_size"

// isCheckViolation reports whether err is Postgres's check_violation for
// the named constraint.
func isCheckViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == constraint
}

// Enqueuer writes events into webhook_outbox inside the application's own
// transaction: the event exists if and only if the transaction commits,
// and the table's insert trigger wakes the workers when it does.
type Enqueuer struct {
	// MaxPayloadBytes refuses larger payloads; zero means
	// DefaultMaxPayloadBytes.
	MaxPayloadBytes int
}

// Enqueue inserts one event into webhook_outbox using tx. The payload must
// be valid JSON no larger than the limit. It returns the outbox row's id.
func (e Enqueuer) Enqueue(ctx context.Context, tx pgx.Tx, eventType string, payload []byte) (string, error) {
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

	var id string
	if err := tx.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ($1, $2) RETURNING id`,
		eventType, string(payload)).Scan(&id); err != nil {
		if isCheckViolation(err, payloadSizeConstraint) {
			// The stored JSON text (jsonb prints ", " and ": ") is over
			// the limit though the bytes given were not.
			return "", fmt.Errorf("%w: %d bytes, stored as JSON text over the limit of %d bytes (constraint %s)",
				ErrPayloadTooLarge, len(payload), DefaultMaxPayloadBytes, payloadSizeConstraint)
		}
		return "", fmt.Errorf("webhook: enqueue %s: %w", eventType, err)
	}
	return id, nil
}

// Enqueue inserts one event into webhook_outbox using tx, with the default
// payload limit.
//
// Other languages enqueue the same way with plain SQL:
//
//	INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{"id": "in_1"}');
func Enqueue(ctx context.Context, tx pgx.Tx, eventType string, payload []byte) (string, error) {
	return Enqueuer{}.Enqueue(ctx, tx, eventType, payload)
}
