package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Operational events tell the application what became of its customers'
// endpoints and deliveries, so it can tell the customer (by email, in its
// dashboard): events addressed to the operator endpoint
// (Settings.OpsEndpointID), sent through the outbox like any other, signed
// and retried (docs/OPERATIONS.md, Operational events).
//
//	endpoint.disabled   the dispatcher disabled an endpoint: failing for
//	                    DisableAfter, or a 410 Gone. Enqueued in the
//	                    disabling transaction.
//	endpoint.recovered  an endpoint's circuit breaker closed: the probes
//	                    after a pause succeeded. Enqueued after the mark
//	                    that closed it.
//	delivery.exhausted  a delivery failed for good: its attempts spent, a
//	                    permanent error, an unusable endpoint. Enqueued by
//	                    the failing mark's own statement.
//
// Each names the tenant, the endpoint and the delivery. The operator
// endpoint is the application's, without a tenant: an event about a
// tenant's endpoint carries the tenant in its payload and goes to the
// application, never to a tenant; an operator endpoint of a tenant is sent
// nothing, with an error logged, and what the event is about goes ahead.
// Nothing is sent about the operator endpoint or a delivery to it: a
// failing operator endpoint would otherwise notify itself without end.
// With no operator endpoint, no statement is added to a mark.

// The operational events' types.
const (
	EventEndpointDisabled  = "endpoint.disabled"
	EventEndpointRecovered = "endpoint.recovered"
	EventDeliveryExhausted = "delivery.exhausted"
)

// Why an endpoint was disabled (EndpointDisabled.Cause), as the
// endpoints_disabled_total metric's reason label says it.
const (
	DisabledFailing = "failing" // no success for DisableAfter
	DisabledGone    = "gone"    // the receiver answered 410 Gone
)

// OpsSubject is what an operational event is about, the first fields of
// every payload.
type OpsSubject struct {
	Tenant     string `json:"tenant"` // "" for an endpoint without one
	EndpointID string `json:"endpoint_id"`
	URL        string `json:"url"` // redacted: no query string, userinfo or fragment
	// The delivery whose attempt made the event: the one that disabled
	// the endpoint, closed its breaker, or failed for good.
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
}

// EndpointDisabled is endpoint.disabled's payload.
type EndpointDisabled struct {
	OpsSubject
	Reason string `json:"reason"`
	Cause  string `json:"cause"` // DisabledFailing or DisabledGone
	// The failure run; none for a 410 from an endpoint that was not failing.
	FailingSince        time.Time `json:"failing_since,omitzero"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	DisabledAt          time.Time `json:"disabled_at"`
}

// EndpointRecovered is endpoint.recovered's payload.
type EndpointRecovered struct {
	OpsSubject
	PausedAt    time.Time `json:"paused_at,omitzero"` // when the breaker last opened
	RecoveredAt time.Time `json:"recovered_at"`
}

// DeliveryExhausted is delivery.exhausted's payload; exhaustedCTE writes
// it.
type DeliveryExhausted struct {
	OpsSubject
	EventType  string    `json:"event_type"`
	Attempts   int       `json:"attempts"`
	StatusCode int       `json:"status_code,omitempty"` // the last answer's; none without one
	LastError  string    `json:"last_error"`            // as stored: cleaned and capped
	FailedAt   time.Time `json:"failed_at"`
}

// subject is what an event made by d's attempt is about; the tenant and
// the url are read with the event.
func (d delivery) subject() OpsSubject {
	return OpsSubject{EndpointID: d.endpointID, DeliveryID: d.id, EventID: d.eventID}
}

// notifies reports whether events about endpointID go to an operator
// endpoint: one is set, and it is not endpointID.
func (s Settings) notifies(endpointID string) bool {
	return s.OpsEndpointID != "" && s.OpsEndpointID != endpointID
}

// notifyOps enqueues the operational event eventType about endpointID,
// its payload v, to the operator endpoint in tx. key makes it once per
// occurrence. An operator endpoint of a tenant is refused (logged); the
// caller's work goes ahead.
func (p *Dispatcher) notifyOps(ctx context.Context, tx pgx.Tx, eventType, endpointID, key string, v any) error {
	if !p.cfg.notifies(endpointID) {
		return nil
	}
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = (Enqueuer{}).EnqueueEvent(ctx, tx, Event{
		Type: eventType, Payload: body, EndpointID: p.cfg.OpsEndpointID, IdempotencyKey: key,
	})
	switch {
	case errors.Is(err, ErrInvalidEvent):
		p.opsRefused(eventType, endpointID, err.Error())
	case err != nil:
		return fmt.Errorf("enqueue %s to the operator endpoint: %w", eventType, err)
	}
	return nil
}

// opsRefused logs an operational event not sent because the operator
// endpoint belongs to a tenant: it names another's endpoint.
func (p *Dispatcher) opsRefused(eventType, endpointID, why string) {
	p.logger.Error("operational event not sent: "+EnvOpsEndpointID+" names an endpoint of a tenant; the operator's endpoint has none",
		"event_type", eventType, "ops_endpoint_id", p.cfg.OpsEndpointID, "endpoint_id", endpointID, "error", why)
}

// recoveredSQL reads what endpoint.recovered says of the endpoint.
const recoveredSQL = `SELECT url, coalesce(tenant_id, ''), now() FROM webhook_endpoints WHERE id = $1`

// notifyRecovered enqueues endpoint.recovered for d's endpoint, whose
// breaker d's success closed; pausedAt is when it last opened. The close
// committed with the mark, so a process that stops in between loses this
// notice (the endpoint works again; nothing waits for it). The key — the
// endpoint and that opening — makes it once per recovery.
func (p *Dispatcher) notifyRecovered(ctx context.Context, d delivery, pausedAt *time.Time, log *slog.Logger) {
	n := EndpointRecovered{OpsSubject: d.subject()}
	if pausedAt != nil {
		n.PausedAt = *pausedAt
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var url string
		if err := tx.QueryRow(ctx, recoveredSQL, d.endpointID).Scan(&url, &n.Tenant, &n.RecoveredAt); err != nil {
			return err
		}
		n.URL = redactURL(url)
		key := EventEndpointRecovered + ":" + d.endpointID + ":" + n.PausedAt.UTC().Format(time.RFC3339Nano)
		return p.notifyOps(ctx, tx, EventEndpointRecovered, d.endpointID, key, n)
	})
	if err != nil {
		log.Error("operational event not enqueued", "event_type", EventEndpointRecovered, "error", err.Error())
	}
}

// exhaustedCTE is markExhaustedSQL's own: when the mark ($7) fails the
// delivery for good, it enqueues delivery.exhausted (DeliveryExhausted's
// fields) to the operator endpoint ($21), the redacted url ($22) from the
// attempt. It reads from marked, so it writes once per delivery that
// fails: a mark that finds the delivery resolved writes nothing, and a
// requeued delivery that fails again is a new notice, keyed by its
// attempts and the mark's time. An operator endpoint of a tenant is sent
// nothing (exhaustedColumns says so).
//
// It is a statement of its own only for such a mark: webhook_outbox's
// wake trigger runs once per INSERT statement, rows or none.
var exhaustedCTE = `, ops_endpoint AS (
	SELECT tenant_id IS NOT NULL AS refused FROM webhook_endpoints WHERE id = $21::uuid
), exhausted AS (
	INSERT INTO webhook_outbox (event_type, endpoint_id, idempotency_key, payload)
	SELECT '` + EventDeliveryExhausted + `', $21::uuid,
		'` + EventDeliveryExhausted + `:' || x.id || ':' || x.attempts || ':' || (extract(epoch FROM now()) * 1000000)::bigint,
		jsonb_strip_nulls(jsonb_build_object('tenant', coalesce(ep.tenant_id, ''), 'endpoint_id', x.endpoint_id, 'url', $22::text,
			'delivery_id', x.id, 'event_id', x.event_id, 'event_type', e.event_type, 'attempts', x.attempts,
			'status_code', NULLIF($3::int, 0), 'last_error', NULLIF($5::text, ''), 'failed_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
	FROM marked m JOIN webhook_deliveries x ON x.id = m.id
	JOIN webhook_events e ON e.id = x.event_id JOIN webhook_endpoints ep ON ep.id = x.endpoint_id
	WHERE $7 = 'failed' AND NOT EXISTS (SELECT FROM ops_endpoint WHERE refused)
	ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
)`

// exhaustedColumns ends markExhaustedSQL's row: whether the operator
// endpoint, of a tenant, refused the notice of a delivery the mark failed.
const exhaustedColumns = `, EXISTS (SELECT FROM marked) AND $7 = 'failed' AND EXISTS (SELECT FROM ops_endpoint WHERE refused)`
