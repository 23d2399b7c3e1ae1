package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// The circuit breaker lives on the endpoint row, so every replica sees one
// state. It judges an endpoint by the share of its HTTP attempts that fail
// over a recent window, not by a streak: an endpoint that answers most
// requests is alive, and pausing it only delays what its retries deliver.
//
//	closed     deliveries flow. The first failure after a quiet spell
//	           starts a window (breaker_window_at) of BreakerWindow; its
//	           attempts and failures are counted (breaker_requests,
//	           breaker_failures). Once the window holds BreakerMinRequests
//	           attempts, a failure that brings the failed share to
//	           BreakerFailureRate percent opens the breaker. The minimum
//	           stays under the per-process cap by default, so a dead
//	           endpoint gets at most that many first attempts at once.
//	open       paused_until holds every delivery back (the claim skips them;
//	           they stay pending, attempts untouched; new ones are born
//	           held, so no first attempt goes out); each reopening
//	           doubles the pause, from BreakerCooldown up to
//	           BreakerMaxCooldown. Outcomes of attempts that were in
//	           flight when it opened count as nothing but the failure run
//	           (failing_since, for DisableAfter).
//	half-open  the pause is over: a trial with fresh counts. The claim
//	           admits one probe at a time, and one more at once for each
//	           probe that succeeded, up to BreakerProbes (throttle.go);
//	           probes go first to deliveries already attempted, so an
//	           endpoint that fails every first attempt still gets its
//	           messages. BreakerProbes successes close the breaker; a
//	           failure that brings the trial's failed share to
//	           BreakerFailureRate reopens it — the first probe's failure
//	           does, so an endpoint that is down gets one probe per pause.
//
// Both outcomes are counted by the attempt's own mark (markDelivery), in
// the order the marks commit, whichever replica made them. A success on a
// proven endpoint with no window, no failure run and a closed breaker
// writes nothing: the common case costs no statement and no write. The
// first success of an endpoint proves it (proven_at): its first attempts
// are no longer held to the cap a new endpoint's are (bornSQL). A success
// after the window ended clears the counts.
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

// breakerWatching is the SQL test of an endpoint (alias ep) whose next
// success must be counted: it has a failure run, a window or a tripped
// breaker.
const breakerWatching = `(ep.consecutive_failures > 0 OR ep.breaker_window_at IS NOT NULL OR ep.paused_until IS NOT NULL OR ep.breaker_recovering)`

// breakerWatchingRow is breakerWatching on the bare row.
var breakerWatchingRow = strings.ReplaceAll(breakerWatching, "ep.", "")

// breakerOutcome is what an attempt's mark did to its endpoint's breaker
// (markDelivery): a success may have closed it; a failure may have opened
// it, or found the endpoint failing for the whole disable window.
type breakerOutcome struct {
	closed, opened     bool
	requests, failures int
	pausedUntil        *time.Time
	expire             bool
}

// noteOutcome logs and counts what d's mark did to its endpoint's breaker,
// and disables an endpoint failing for too long.
func (p *Dispatcher) noteOutcome(ctx context.Context, d delivery, b breakerOutcome, log *slog.Logger) {
	if b.closed {
		log.Info("endpoint recovered: circuit breaker closed")
	}
	if b.opened {
		p.metrics.breakerOpened()
		log.Warn("endpoint circuit breaker open: its deliveries wait", "failed", b.failures, "of_requests", b.requests,
			"paused_until", b.pausedUntil.UTC().Format(time.RFC3339Nano))
	}
	if b.expire {
		ctx, cancel := claim.MarkContext(ctx)
		defer cancel()
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
			_, err = (Enqueuer{}).EnqueueEvent(ctx, tx, Event{
				Type: EventEndpointDisabled, Payload: body, EndpointID: ops, IdempotencyKey: key,
			})
			switch {
			case errors.Is(err, ErrInvalidEvent):
				// The operator endpoint belongs to a tenant: the notice,
				// which names another endpoint, is not sent to it, and the
				// disable goes ahead.
				p.logger.Error("operator notice not sent: "+EnvOpsEndpointID+" names an endpoint of a tenant; the operator's endpoint has none",
					"ops_endpoint_id", ops, "endpoint_id", d.endpointID, "error", err.Error())
			case err != nil:
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
