package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replay is what ReplayEvent did.
type Replay struct {
	EventID    string // the clone
	ReplayOf   string // the original
	Resumed    bool   // an interrupted replay's clone was completed rather than a new one made
	Deliveries int    // deliveries created for the clone
	Attempts   Tally
}

// ReplayBatch is what ReplayFailedSince did.
type ReplayBatch struct {
	Events     int // clones that got a delivery to the endpoint
	Resumed    int // of those, clones left behind by an interrupted run
	Deliveries int
	Attempts   Tally
}

// ReplayEvent replays an event (or, given a clone, its original) where
// the original went — to the one endpoint it was addressed to
// (Event.EndpointID), or to every enabled endpoint now subscribed to its
// type (ReplayTargets lists them) — and makes the first attempts before
// returning.
func (p *Dispatcher) ReplayEvent(ctx context.Context, eventID string) (Replay, error) {
	var rep Replay
	var err error
	if rep.ReplayOf, err = replayRoot(ctx, p.pool, eventID); err != nil {
		return rep, err
	}

	// Step 1: an interrupted replay's clone, or a new clone, committed.
	var (
		eventType string
		payload   []byte
		createdAt time.Time
	)
	err = p.pool.QueryRow(ctx, `SELECT c.id, c.event_type, c.payload, c.created_at FROM webhook_events c
WHERE c.replay_of = $1 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = c.id)
ORDER BY c.created_at, c.id LIMIT 1`, rep.ReplayOf).Scan(&rep.EventID, &eventType, &payload, &createdAt)
	switch {
	case err == nil:
		rep.Resumed = true
	case errors.Is(err, pgx.ErrNoRows):
		err = p.pool.QueryRow(ctx, `INSERT INTO webhook_events (event_type, payload, replay_of, ordering_key, tenant_id)
SELECT event_type, payload, id, ordering_key, tenant_id FROM webhook_events WHERE id = $1
RETURNING id, event_type, payload, created_at`, rep.ReplayOf).Scan(&rep.EventID, &eventType, &payload, &createdAt)
		if err != nil {
			return rep, fmt.Errorf("webhook: replay %s: clone: %w", eventID, err)
		}
	default:
		return rep, fmt.Errorf("webhook: replay %s: %w", eventID, err)
	}
	if h := p.hooks.afterReplayClone; h != nil {
		if err := h([]string{rep.EventID}); err != nil {
			return rep, err
		}
	}

	// Step 2: the clone's deliveries, then their first attempts.
	ev, err := newEvent(eventType, createdAt, payload, "") // a replay is the operator's, not the original's trace
	if err != nil {
		return rep, fmt.Errorf("webhook: replay %s: %w", eventID, err)
	}
	ds, err := p.bornDeliveries(ctx, map[string]event{rep.EventID: ev}, "")
	if err != nil {
		return rep, fmt.Errorf("webhook: replay %s (clone %s committed; run the replay again to complete it): %w", eventID, rep.EventID, err)
	}
	rep.Deliveries = len(ds)
	p.logger.Info("event replayed", "event_id", rep.ReplayOf, "clone_id", rep.EventID, "resumed", rep.Resumed, "deliveries", len(ds))
	rep.Attempts = p.attemptAll(ctx, ds)
	return rep, nil
}

// replayRoot is the event a replay of eventID replays: the event itself,
// or, given a replay, its original.
func replayRoot(ctx context.Context, db DB, eventID string) (string, error) {
	if err := validateID(eventID); err != nil {
		return "", err
	}
	var root string
	err := db.QueryRow(ctx, `SELECT coalesce(replay_of, id) FROM webhook_events WHERE id = $1`, eventID).Scan(&root)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("%w: event %s", ErrNotFound, eventID)
	case err != nil:
		return "", fmt.Errorf("webhook: replay %s: %w", eventID, err)
	}
	return root, nil
}

// replayTargetsSQL lists the endpoints a replay of the original $1
// reaches, by the rule its deliveries are born by (reachesSQL).
var replayTargetsSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints ep
WHERE EXISTS (SELECT 1 FROM (SELECT o.event_type, o.tenant_id, ` + addressedSQL("o") + ` AS target FROM webhook_events o WHERE o.id = $1) ev
	WHERE ` + reachesSQL + `)
ORDER BY created_at, id`

// ReplayTargets lists, without secrets, the endpoints ReplayEvent would
// send eventID to now: where the original went — the endpoint it was
// addressed to, if that is enabled, or every enabled endpoint now
// subscribed to its type. An operator reads it before replaying.
func ReplayTargets(ctx context.Context, db DB, eventID string) ([]Endpoint, error) {
	root, err := replayRoot(ctx, db, eventID)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, replayTargetsSQL, root)
	if err != nil {
		return nil, fmt.Errorf("webhook: replay %s: endpoints: %w", eventID, err)
	}
	eps, err := pgx.CollectRows(rows, scanEndpoint)
	if err != nil {
		return nil, fmt.Errorf("webhook: replay %s: endpoints: %w", eventID, err)
	}
	return eps, nil
}

// replayTodoSQL selects, for one endpoint ($1), the families (originals)
// with a delivery to it that failed at or after $2 and none that is pending
// or succeeded: data the endpoint never got. Once a replay's delivery is
// pending or succeeded the family is settled, so running the replay again
// does nothing; if that delivery fails for good too, the next run replays
// the family once more.
const replayTodoSQL = `SELECT DISTINCT coalesce(e.replay_of, e.id) AS root
FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
WHERE d.endpoint_id = $1 AND d.status = 'failed' AND d.created_at >= $2
  AND NOT EXISTS (
	SELECT 1 FROM webhook_events f JOIN webhook_deliveries fd ON fd.event_id = f.id AND fd.endpoint_id = $1
	WHERE coalesce(f.replay_of, f.id) = coalesce(e.replay_of, e.id) AND fd.status IN ('pending', 'succeeded'))`

// reusableCloneSQL is the condition on clone c of a todo family that makes
// it reusable: an interrupted run left it without a delivery to $1.
const reusableCloneSQL = `c.replay_of = todo.root
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries cd WHERE cd.event_id = c.id AND cd.endpoint_id = $1)`

// ReplayFailedSince replays, to one endpoint, every event whose delivery to
// it failed since the given time and has not reached it since, and makes
// the first attempts before returning. Each event is replayed once however
// often its delivery failed; running it again after it completed does
// nothing new.
func (p *Dispatcher) ReplayFailedSince(ctx context.Context, endpointID string, since time.Time) (ReplayBatch, error) {
	var rb ReplayBatch
	if err := validateID(endpointID); err != nil {
		return rb, err
	}
	var enabled bool
	err := p.pool.QueryRow(ctx, `SELECT enabled FROM webhook_endpoints WHERE id = $1`, endpointID).Scan(&enabled)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return rb, fmt.Errorf("%w: endpoint %s", ErrNotFound, endpointID)
	case err != nil:
		return rb, fmt.Errorf("webhook: replay endpoint %s: %w", endpointID, err)
	case !enabled:
		return rb, fmt.Errorf("webhook: replay endpoint %s: endpoint is disabled; enable it first", endpointID)
	}

	// Step 1: a clone for every family without a reusable one, committed.
	tag, err := p.pool.Exec(ctx, `WITH todo AS (`+replayTodoSQL+`)
INSERT INTO webhook_events (event_type, payload, replay_of, ordering_key, tenant_id)
SELECT o.event_type, o.payload, o.id, o.ordering_key, o.tenant_id FROM todo JOIN webhook_events o ON o.id = todo.root
WHERE NOT EXISTS (SELECT 1 FROM webhook_events c WHERE `+reusableCloneSQL+`)`, endpointID, since)
	if err != nil {
		return rb, fmt.Errorf("webhook: replay endpoint %s: clones: %w", endpointID, err)
	}
	created := int(tag.RowsAffected())

	// Step 2: one clone per family (the newest reusable) and its delivery.
	rows, err := p.pool.Query(ctx, `WITH todo AS (`+replayTodoSQL+`)
SELECT DISTINCT ON (c.replay_of) c.id, c.event_type, c.payload, c.created_at
FROM todo JOIN webhook_events c ON `+reusableCloneSQL+`
ORDER BY c.replay_of, c.created_at DESC, c.id`, endpointID, since)
	if err != nil {
		return rb, fmt.Errorf("webhook: replay endpoint %s: %w", endpointID, err)
	}
	type clone struct {
		ID, EventType string
		Payload       []byte
		CreatedAt     time.Time
	}
	clones, err := pgx.CollectRows(rows, pgx.RowToStructByPos[clone])
	if err != nil {
		return rb, fmt.Errorf("webhook: replay endpoint %s: %w", endpointID, err)
	}
	events := make(map[string]event, len(clones))
	cloneIDs := make([]string, len(clones))
	for i, c := range clones {
		if events[c.ID], err = newEvent(c.EventType, c.CreatedAt, c.Payload, ""); err != nil {
			return rb, fmt.Errorf("webhook: replay endpoint %s: %w", endpointID, err)
		}
		cloneIDs[i] = c.ID
	}
	rb.Events = len(clones)
	rb.Resumed = max(len(clones)-created, 0)
	if len(clones) == 0 {
		return rb, nil
	}
	if h := p.hooks.afterReplayClone; h != nil {
		if err := h(cloneIDs); err != nil {
			return rb, err
		}
	}
	ds, err := p.bornDeliveries(ctx, events, endpointID)
	if err != nil {
		return rb, fmt.Errorf("webhook: replay endpoint %s (%d clones committed; run the replay again to complete it): %w", endpointID, len(clones), err)
	}
	rb.Deliveries = len(ds)
	p.logger.Info("failed deliveries replayed", "endpoint_id", endpointID, "since", since.UTC().Format(time.RFC3339),
		"events", rb.Events, "resumed", rb.Resumed, "deliveries", rb.Deliveries)
	rb.Attempts = p.attemptAll(ctx, ds)
	return rb, nil
}

// attemptAll makes the first attempts of freshly born deliveries on the
// attempt slots, as a fan-out's are made, and waits for them; deliveries
// born held wake the retry lane instead.
func (p *Dispatcher) attemptAll(ctx context.Context, ds []delivery) Tally {
	units, wake := p.firstAttempts(ds, time.Now(), nil)
	if wake {
		p.wakeRetries()
	}
	return p.outboxLane.Work(ctx, units)
}
