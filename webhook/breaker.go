package webhook

import (
	"context"
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
// transaction — an endpoint.disabled event to OpsEndpointID and
// Config.OnDisable. A 410 Gone disables at once (disableGone), with the
// same notices. A breaker that closes sends endpoint.recovered
// (opsevents.go).

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
	closedPause        *time.Time // closed: when the breaker last opened
	requests, failures int
	pausedUntil        *time.Time
	expire             bool
	opsRefused         bool // the operator endpoint, of a tenant, was not sent delivery.exhausted
}

// noteOutcome logs and counts what d's mark did to its endpoint's breaker,
// tells the operator endpoint of a recovery, and disables an endpoint
// failing for too long.
func (p *Dispatcher) noteOutcome(ctx context.Context, d delivery, b breakerOutcome, log *slog.Logger) {
	if b.closed {
		log.Info("endpoint recovered: circuit breaker closed")
		if p.cfg.notifies(d.endpointID) {
			ctx, cancel := claim.MarkContext(ctx)
			defer cancel()
			p.notifyRecovered(ctx, d, b.closedPause, log)
		}
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
// window ($3); the guard makes a racing second disable a no-op. It
// returns the row disable reads.
const disableFailingSQL = `UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, updated_at = now()
WHERE id = $1 AND enabled AND failing_since <= now() - $3::interval
RETURNING url, coalesce(tenant_id, ''), failing_since, consecutive_failures, now()`

// disableFailing disables d's endpoint for failing too long and, in the
// same transaction, enqueues the notices. Its deliveries stay pending,
// held until it is enabled again.
func (p *Dispatcher) disableFailing(ctx context.Context, d delivery, log *slog.Logger) {
	reason := fmt.Sprintf("failing without a success for over %s (WEBHOOK_DISABLE_AFTER)", p.cfg.DisableAfter)
	if notice, ok := p.disable(ctx, d, log, DisabledFailing, reason, disableFailingSQL, p.cfg.DisableAfter); ok {
		log.Error("endpoint disabled: failing for too long; its deliveries are held until it is enabled",
			"reason", reason, "failing_since", notice.FailingSince.UTC().Format(time.RFC3339),
			"consecutive_failures", notice.ConsecutiveFailures, "notified", p.cfg.OpsEndpointID != "" || p.onDisable != nil)
	}
}

// disable disables d's endpoint for cause by sql, whose $1 is the
// endpoint, $2 the reason, then args, and whose row is the endpoint's url,
// tenant, failure run and the time; and, in the same transaction, enqueues
// endpoint.disabled to the operator endpoint and runs OnDisable. The key —
// the endpoint and the disable's time — makes it once per disable. It
// reports whether it disabled the endpoint: sql's guard may find it
// disabled already.
func (p *Dispatcher) disable(ctx context.Context, d delivery, log *slog.Logger, cause, reason, sql string, args ...any) (EndpointDisabled, bool) {
	notice := EndpointDisabled{OpsSubject: d.subject(), Reason: reason, Cause: cause}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var (
			url          string
			failingSince *time.Time
		)
		err := tx.QueryRow(ctx, sql, append([]any{d.endpointID, reason}, args...)...).
			Scan(&url, &notice.Tenant, &failingSince, &notice.ConsecutiveFailures, &notice.DisabledAt)
		if err != nil {
			return err // pgx.ErrNoRows: a sibling disabled it first
		}
		notice.URL = redactURL(url)
		if failingSince != nil {
			notice.FailingSince = *failingSince
		}
		key := EventEndpointDisabled + ":" + d.endpointID + ":" + notice.DisabledAt.UTC().Format(time.RFC3339Nano)
		if err := p.notifyOps(ctx, tx, EventEndpointDisabled, d.endpointID, key, notice); err != nil {
			return err
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
		return notice, false
	case err != nil:
		log.Error("disable endpoint", "cause", cause, "error", err.Error())
		return notice, false
	}
	p.metrics.endpointDisabled(cause)
	return notice, true
}
