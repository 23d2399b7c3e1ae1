package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/claim"
)

// The circuit breaker lives on the endpoint row, so every replica sees one
// state:
//
//	closed     consecutive_failures < BreakerFailures: deliveries flow
//	open       the threshold reached: paused_until holds every delivery
//	           back (the claim skips them; they stay pending, attempts
//	           untouched); each reopening doubles the pause, from
//	           BreakerCooldown up to BreakerMaxCooldown
//	half-open  the pause is over: the claim admits one probe and holds
//	           the breaker for the probe's lease (probing); its success
//	           closes the breaker, its failure reopens it
//
// An endpoint failing for DisableAfter with no success between is
// disabled with a reason: an error log line, a metric, and — in the same
// transaction — a postbox.endpoint.disabled event to OpsEndpointID and
// Config.OnDisable. A 410 Gone disables at once (disableGone).

// EventEndpointDisabled is the event type of the operator notice.
const EventEndpointDisabled = "postbox.endpoint.disabled"

// EndpointDisabled is the notice's payload.
type EndpointDisabled struct {
	EndpointID          string    `json:"endpoint_id"`
	URL                 string    `json:"url"` // redacted: no query string or userinfo
	Reason              string    `json:"reason"`
	FailingSince        time.Time `json:"failing_since"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	DisabledAt          time.Time `json:"disabled_at"`
}

// breakerReopens is the SQL test, on the endpoint row before the failure
// is counted, that this failure (re)opens the breaker: the threshold
// ($2) is reached and the breaker is not already open — or it is the
// probe that failed. In-flight attempts that fail after the breaker opened
// do not lengthen its pause.
const breakerReopens = `(consecutive_failures + 1 >= $2 AND (probing OR paused_until IS NULL OR paused_until <= clock_timestamp()))`

// breakerFailureSQL counts one failed attempt: $1 endpoint, $2 threshold,
// $3 first cool-down and $4 its cap (seconds), $5 the disable window.
var breakerFailureSQL = `UPDATE webhook_endpoints SET
	consecutive_failures = consecutive_failures + 1,
	failing_since = coalesce(failing_since, now()),
	paused_until = CASE WHEN ` + breakerReopens + `
		THEN clock_timestamp() + make_interval(secs => least($3::float8 * power(2, breaker_opens), $4::float8))
		ELSE paused_until END,
	breaker_opens = CASE WHEN ` + breakerReopens + ` THEN least(breaker_opens + 1, 30) ELSE breaker_opens END,
	probing = CASE WHEN ` + breakerReopens + ` THEN false ELSE probing END
WHERE id = $1
RETURNING consecutive_failures, coalesce(paused_until > clock_timestamp(), false), paused_until,
	enabled AND failing_since <= now() - $5::interval`

// breakerSuccessSQL closes the breaker after a success. It writes only
// when there is something to reset.
const breakerSuccessSQL = `UPDATE webhook_endpoints SET
	consecutive_failures = 0, failing_since = NULL, breaker_opens = 0, paused_until = NULL, probing = false
WHERE id = $1 AND (consecutive_failures > 0 OR probing OR paused_until IS NOT NULL)`

// noteOutcome feeds one HTTP attempt's outcome to d's endpoint breaker. A
// success on an endpoint that was not failing when d was loaded writes
// nothing: the common case costs no statement.
func (p *Dispatcher) noteOutcome(ctx context.Context, d delivery, m DeliveryMark, log *slog.Logger) {
	if m.Attempt == 0 {
		return // no request was made
	}
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	if m.Status == StatusSucceeded {
		if !d.failing {
			return
		}
		tag, err := p.pool.Exec(ctx, breakerSuccessSQL, d.endpointID)
		switch {
		case err != nil:
			log.Error("reset endpoint circuit breaker", "error", err.Error())
		case tag.RowsAffected() > 0:
			log.Info("endpoint recovered: circuit breaker closed")
		}
		return
	}
	var (
		failures     int
		open, expire bool
		pausedUntil  *time.Time
	)
	err := p.pool.QueryRow(ctx, breakerFailureSQL, d.endpointID, p.cfg.BreakerFailures,
		p.cfg.BreakerCooldown.Seconds(), p.cfg.BreakerMaxCooldown.Seconds(), p.cfg.DisableAfter).
		Scan(&failures, &open, &pausedUntil, &expire)
	if err != nil {
		log.Error("count endpoint failure for its circuit breaker", "error", err.Error())
		return
	}
	if open && failures >= p.cfg.BreakerFailures {
		p.metrics.breakerOpened()
		log.Warn("endpoint circuit breaker open: its deliveries wait", "consecutive_failures", failures,
			"paused_until", pausedUntil.UTC().Format(time.RFC3339Nano))
	}
	if expire {
		p.disableFailing(ctx, d, log)
	}
}

// disableFailingSQL disables an endpoint that has failed for the whole
// window ($3); the guard makes a racing second disable a no-op.
const disableFailingSQL = `UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, updated_at = now()
WHERE id = $1 AND enabled AND failing_since <= now() - $3::interval
RETURNING url, failing_since, consecutive_failures, now()`

// disableFailing disables d's endpoint for failing too long and, in the
// same transaction, enqueues the notices. Its deliveries stay pending,
// held until it is enabled again.
func (p *Dispatcher) disableFailing(ctx context.Context, d delivery, log *slog.Logger) {
	reason := fmt.Sprintf("failing without a success for over %s (WEBHOOK_DISABLE_AFTER)", p.cfg.DisableAfter)
	var notice EndpointDisabled
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var url string
		err := tx.QueryRow(ctx, disableFailingSQL, d.endpointID, reason, p.cfg.DisableAfter).
			Scan(&url, &notice.FailingSince, &notice.ConsecutiveFailures, &notice.DisabledAt)
		if err != nil {
			return err // pgx.ErrNoRows: a sibling disabled it first
		}
		notice.EndpointID, notice.URL, notice.Reason = d.endpointID, redactURL(url), reason
		if ops := p.cfg.OpsEndpointID; ops != "" && ops != d.endpointID {
			body, err := json.Marshal(notice)
			if err != nil {
				return err
			}
			// The key makes a retried disable notify once.
			key := EventEndpointDisabled + ":" + d.endpointID + ":" + notice.FailingSince.UTC().Format(time.RFC3339Nano)
			if _, err := (Enqueuer{}).EnqueueEvent(ctx, tx, Event{
				Type: EventEndpointDisabled, Payload: body, EndpointID: ops, IdempotencyKey: key,
			}); err != nil {
				return fmt.Errorf("enqueue the notice to the operator endpoint: %w", err)
			}
		}
		if p.onDisable != nil {
			if err := p.onDisable(ctx, tx, notice); err != nil {
				return fmt.Errorf("OnDisable: %w", err)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		log.Error("disable failing endpoint", "error", err.Error())
	default:
		p.metrics.endpointDisabled("failing")
		log.Error("endpoint disabled: failing for too long; its deliveries are held until it is enabled",
			"reason", reason, "failing_since", notice.FailingSince.UTC().Format(time.RFC3339),
			"consecutive_failures", notice.ConsecutiveFailures, "notified", p.cfg.OpsEndpointID != "" || p.onDisable != nil)
	}
}
