package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// The operator's read model of the webhook half (worker show, the
// console): an event with its deliveries, their attempt logs and its
// replays; one delivery; one webhook_outbox row; the failed rows. No
// endpoint secret is ever read.

// EventRecord is a webhook_events row with what became of it.
type EventRecord struct {
	ID        string `json:"id"`
	Tenant    string `json:"tenant,omitempty"` // whose the event is (tenant.go)
	EventType string `json:"event_type"`
	// Deprecated says the catalog marks the event's type deprecated
	// (eventtype.go): it still sends; its senders should move on.
	Deprecated bool            `json:"type_deprecated,omitempty"`
	Payload    json.RawMessage `json:"payload"`
	CreatedAt  time.Time       `json:"created_at"`
	OutboxID   string          `json:"outbox_id,omitempty"` // the producing webhook_outbox row (pruned once dispatched)
	ReplayOf   string          `json:"replay_of,omitempty"` // the original, when this event is a replay

	Deliveries []DeliveryRecord `json:"deliveries"`
	// Replays are the family's other events: the original's clones, or,
	// for a clone, the original and its other clones. Each lists its
	// deliveries without their attempt logs.
	Replays []EventRecord `json:"replays,omitempty"`
}

// DeliveryRecord is a webhook_deliveries row and its attempt log.
type DeliveryRecord struct {
	ID          string         `json:"id"`
	EventID     string         `json:"event_id"`
	EventType   string         `json:"event_type"`
	EndpointID  string         `json:"endpoint_id"`
	EndpointURL string         `json:"endpoint_url"`
	Tenant      string         `json:"tenant,omitempty"` // its endpoint's, and so its event's
	Status      DeliveryStatus `json:"status"`
	Attempts    int            `json:"attempts"`
	NextRetryAt *time.Time     `json:"next_retry_at,omitempty"`
	LastError   string         `json:"last_error,omitempty"`
	CreatedAt   time.Time      `json:"created_at"`
	DeliveredAt *time.Time     `json:"delivered_at,omitempty"`
	Log         []AttemptLog   `json:"attempt_log,omitempty"`

	// OrderingKey is the event's ordering key ("" for an unordered
	// event). WaitsFor is the earlier delivery of the endpoint and key
	// that holds this one back, if any; Behind counts the pending
	// deliveries of the key that come after this one (they wait while it
	// is pending, or failed under the block policy). OrderSkipped says an
	// operator let the key go on past this failed delivery.
	OrderingKey  string `json:"ordering_key,omitempty"`
	WaitsFor     string `json:"waits_for,omitempty"`
	Behind       int    `json:"behind,omitempty"`
	OrderSkipped bool   `json:"order_skipped,omitempty"`
}

// AttemptLog is one webhook_delivery_attempts row: one HTTP attempt.
type AttemptLog struct {
	Attempt    int           `json:"attempt"`
	At         time.Time     `json:"at"`
	StatusCode int           `json:"status_code,omitempty"` // zero: no response
	Duration   time.Duration `json:"duration_ns"`
	Error      string        `json:"error,omitempty"`
	Excerpt    string        `json:"response_excerpt,omitempty"`
}

// OutboxRecord is a webhook_outbox row.
type OutboxRecord struct {
	ID            string     `json:"id"`
	Tenant        string     `json:"tenant,omitempty"`
	EventType     string     `json:"event_type"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	DispatchedAt  *time.Time `json:"dispatched_at,omitempty"`
	EventID       string     `json:"event_id,omitempty"` // the event its fan-out made
}

var deliveryColumns = `d.id::text, d.event_id::text, e.event_type, d.endpoint_id::text, p.url, d.status, d.attempts,
	` + claim.FiniteTime("d.next_retry_at") + `, coalesce(d.last_error, ''), d.created_at, d.delivered_at,
	coalesce(d.ordering_key, ''), CASE WHEN d.status = 'pending' THEN coalesce(` + waitsForSQL("d") + `, '') ELSE '' END,
	` + behindSQL("d") + `, d.order_skipped_at IS NOT NULL, coalesce(p.tenant_id, '')`

const deliveryFrom = ` FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
JOIN webhook_endpoints p ON p.id = d.endpoint_id `

func scanDelivery(row pgx.CollectableRow) (DeliveryRecord, error) {
	var d DeliveryRecord
	var status string
	err := row.Scan(&d.ID, &d.EventID, &d.EventType, &d.EndpointID, &d.EndpointURL, &status, &d.Attempts,
		&d.NextRetryAt, &d.LastError, &d.CreatedAt, &d.DeliveredAt, &d.OrderingKey, &d.WaitsFor, &d.Behind, &d.OrderSkipped, &d.Tenant)
	d.Status = DeliveryStatus(status)
	return d, err
}

func scanEvent(row pgx.CollectableRow) (EventRecord, error) {
	var e EventRecord
	err := row.Scan(&e.ID, &e.EventType, &e.Payload, &e.CreatedAt, &e.OutboxID, &e.ReplayOf, &e.Tenant, &e.Deprecated)
	return e, err
}

const eventColumns = `id::text, event_type, payload, created_at, coalesce(outbox_id::text, ''), coalesce(replay_of::text, ''), coalesce(tenant_id, ''),
	coalesce((SELECT t.deprecated FROM webhook_event_types t WHERE t.name = event_type), false)`

// GetEvent returns the event with its deliveries (each with its attempt
// log) and its family's replays, or an error matching ErrNotFound.
func GetEvent(ctx context.Context, db DB, id string) (EventRecord, error) {
	if err := validateID(id); err != nil {
		return EventRecord{}, err
	}
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM webhook_events WHERE id = $1`, id)
	if err != nil {
		return EventRecord{}, fmt.Errorf("webhook: get event %s: %w", id, err)
	}
	ev, err := pgx.CollectExactlyOneRow(rows, scanEvent)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ev, fmt.Errorf("%w: event %s", ErrNotFound, id)
	case err != nil:
		return ev, fmt.Errorf("webhook: get event %s: %w", id, err)
	}
	if ev.Deliveries, err = eventDeliveries(ctx, db, ev.ID, true); err != nil {
		return ev, err
	}
	root := ev.ID
	if ev.ReplayOf != "" {
		root = ev.ReplayOf
	}
	rows, err = db.Query(ctx, `SELECT `+eventColumns+` FROM webhook_events
WHERE (replay_of = $1 OR id = $1) AND id <> $2 ORDER BY created_at, id`, root, ev.ID)
	if err != nil {
		return ev, fmt.Errorf("webhook: replays of %s: %w", id, err)
	}
	if ev.Replays, err = pgx.CollectRows(rows, scanEvent); err != nil {
		return ev, fmt.Errorf("webhook: replays of %s: %w", id, err)
	}
	for i := range ev.Replays {
		if ev.Replays[i].Deliveries, err = eventDeliveries(ctx, db, ev.Replays[i].ID, false); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

func eventDeliveries(ctx context.Context, db DB, eventID string, withLog bool) ([]DeliveryRecord, error) {
	rows, err := db.Query(ctx, `SELECT `+deliveryColumns+deliveryFrom+`WHERE d.event_id = $1 ORDER BY p.url, d.id`, eventID)
	if err != nil {
		return nil, fmt.Errorf("webhook: deliveries of %s: %w", eventID, err)
	}
	ds, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("webhook: deliveries of %s: %w", eventID, err)
	}
	if withLog {
		for i := range ds {
			if ds[i].Log, err = readAttemptLog(ctx, db, ds[i].ID); err != nil {
				return nil, err
			}
		}
	}
	return ds, nil
}

func readAttemptLog(ctx context.Context, db DB, deliveryID string) ([]AttemptLog, error) {
	rows, err := db.Query(ctx, `SELECT attempt, created_at, coalesce(status_code, 0), duration_ms, coalesce(error, ''),
	coalesce(response_excerpt, '') FROM webhook_delivery_attempts WHERE delivery_id = $1 ORDER BY created_at, id`, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("webhook: attempts of %s: %w", deliveryID, err)
	}
	log, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AttemptLog, error) {
		var a AttemptLog
		var ms int64
		err := row.Scan(&a.Attempt, &a.At, &a.StatusCode, &ms, &a.Error, &a.Excerpt)
		a.Duration = time.Duration(ms) * time.Millisecond
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: attempts of %s: %w", deliveryID, err)
	}
	return log, nil
}

// GetDelivery returns the delivery with its attempt log, or an error
// matching ErrNotFound.
func GetDelivery(ctx context.Context, db DB, id string) (DeliveryRecord, error) {
	if err := validateID(id); err != nil {
		return DeliveryRecord{}, err
	}
	rows, err := db.Query(ctx, `SELECT `+deliveryColumns+deliveryFrom+`WHERE d.id = $1`, id)
	if err != nil {
		return DeliveryRecord{}, fmt.Errorf("webhook: get delivery %s: %w", id, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDelivery)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, fmt.Errorf("%w: delivery %s", ErrNotFound, id)
	case err != nil:
		return d, fmt.Errorf("webhook: get delivery %s: %w", id, err)
	}
	if d.Log, err = readAttemptLog(ctx, db, d.ID); err != nil {
		return d, err
	}
	return d, nil
}

// GetOutbox returns the webhook_outbox row id, or an error matching
// ErrNotFound (dispatched rows are pruned after the retention).
func GetOutbox(ctx context.Context, db DB, id string) (OutboxRecord, error) {
	if err := validateID(id); err != nil {
		return OutboxRecord{}, err
	}
	rows, err := db.Query(ctx, `SELECT `+outboxColumns+` FROM webhook_outbox o WHERE o.id = $1`, id)
	if err != nil {
		return OutboxRecord{}, fmt.Errorf("webhook: get outbox row %s: %w", id, err)
	}
	o, err := pgx.CollectExactlyOneRow(rows, scanOutbox)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return o, fmt.Errorf("%w: webhook outbox row %s", ErrNotFound, id)
	case err != nil:
		return o, fmt.Errorf("webhook: get outbox row %s: %w", id, err)
	}
	return o, nil
}

var outboxColumns = `o.id::text, o.event_type, o.status, o.attempts, ` + claim.FiniteTime("o.next_attempt_at") + `, coalesce(o.last_error, ''),
	o.created_at, o.dispatched_at, coalesce((SELECT e.id::text FROM webhook_events e WHERE e.outbox_id = o.id), ''), coalesce(o.tenant_id, '')`

func scanOutbox(row pgx.CollectableRow) (OutboxRecord, error) {
	var o OutboxRecord
	err := row.Scan(&o.ID, &o.EventType, &o.Status, &o.Attempts, &o.NextAttemptAt, &o.LastError,
		&o.CreatedAt, &o.DispatchedAt, &o.EventID, &o.Tenant)
	return o, err
}

// GetEndpoint returns the endpoint without its secret, or an error
// matching ErrNotFound.
func GetEndpoint(ctx context.Context, db DB, id string) (Endpoint, error) {
	if err := validateID(id); err != nil {
		return Endpoint{}, err
	}
	rows, _ := db.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1`, id)
	e, err := pgx.CollectExactlyOneRow(rows, scanEndpoint)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return e, fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	case err != nil:
		return e, fmt.Errorf("webhook: get endpoint %s: %w", id, err)
	}
	return e, nil
}

// ListFailedDeliveries returns the newest failed deliveries (without
// attempt logs), at most limit, through the failed partial index, whose
// predicate (migration 00010) it states in full.
func ListFailedDeliveries(ctx context.Context, db DB, limit int) ([]DeliveryRecord, error) {
	rows, err := db.Query(ctx, `SELECT `+deliveryColumns+deliveryFrom+`WHERE d.status = 'failed' AND d.created_at IS NOT NULL
ORDER BY d.created_at DESC LIMIT $1`, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("webhook: list failed deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("webhook: list failed deliveries: %w", err)
	}
	return ds, nil
}

// ListFailedOutbox returns the newest failed webhook_outbox rows (events
// whose fan-out kept failing), at most limit, through the failed partial
// index.
func ListFailedOutbox(ctx context.Context, db DB, limit int) ([]OutboxRecord, error) {
	rows, err := db.Query(ctx, `SELECT `+outboxColumns+` FROM webhook_outbox o WHERE o.status = 'failed' AND o.created_at IS NOT NULL
ORDER BY o.created_at DESC LIMIT $1`, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("webhook: list failed outbox rows: %w", err)
	}
	os, err := pgx.CollectRows(rows, scanOutbox)
	if err != nil {
		return nil, fmt.Errorf("webhook: list failed outbox rows: %w", err)
	}
	return os, nil
}
