package webhook

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/pgtext"
)

// Outcome is what a mark records about one attempt at a delivery, as
// outbox.Outcome is for an email.
type Outcome string

const (
	OutcomeSent   Outcome = "succeeded" // status succeeded: the receiver accepted it (2xx), as outbox.OutcomeSent is an email the relay accepted
	OutcomeFailed Outcome = "failed"    // permanent error, attempts spent or endpoint unusable; waits for a requeue
	OutcomeRetry  Outcome = "retry"     // transient error; stays pending until RetryIn has passed
)

// status is the delivery state the outcome leaves; "" for an unknown one.
func (o Outcome) status() DeliveryStatus {
	switch o {
	case OutcomeSent:
		return StatusSucceeded
	case OutcomeFailed:
		return StatusFailed
	case OutcomeRetry:
		return StatusPending
	}
	return ""
}

// Result is what Mark records of one attempt.
type Result struct {
	Outcome Outcome
	RetryIn time.Duration // OutcomeRetry only: the wait before the next attempt

	// The attempt log row. Attempt is the delivery's attempts count when
	// it was attempted (birth counts as the first claim); zero means no
	// HTTP attempt was made (e.g. the endpoint was disabled) and nothing is
	// logged.
	Attempt    int
	StatusCode int // zero when there was no response
	Duration   time.Duration
	Error      string // empty on success; stored cleaned and capped (pgtext.LastError)
	Excerpt    string // at most 4096 bytes of the response body, cleaned (readExcerpt)

	// Until is the last moment the mark is retried after a connection
	// error: the delivery's lease end. Zero means within MarkTimeout.
	Until time.Time
}

// markSQL logs the attempt and applies the mark in one statement.
//
// The attempt row is written whether or not the mark applies: the HTTP
// request happened and the log is the record of what receivers were sent. The
// mark itself is a compare-and-set on status = 'pending' (see
// docs/design/outbox-transport.md, Detached marks): a writer whose lease
// expired and whose delivery a sibling already resolved is dropped, never
// applied — a late failure must not overwrite a sibling's success. attempts
// is not touched: claims count attempts, marks never do. The mark ends the
// lease, so the delivery no longer counts against its endpoint's
// max_in_flight.
//
// When $9 names the endpoint, the attempt's outcome is counted toward its
// circuit breaker in the same statement ($12: the attempt counts for the
// breaker — a request was made and it did not answer 410 Gone): a success
// (breakerSuccessCTE) or a failure (breakerFailureCTE). Counted at the
// mark, in the order marks commit, the window sees a success made on any
// replica, after the failures before it and before those after it; and an
// endpoint nobody watches costs a primary-key probe and no write.
//
// The statement always returns one row: whether the mark applied, what it
// did to the breaker, then the delivery it handed the key on to as the
// attempt needs it (loadColumns, read in the same statement: one round
// trip per event of a hot key, not two), NULL when it handed nothing on.
var markSQL = markStatement("", "")

// markExhaustedSQL is markSQL for a mark that fails a delivery for good
// while an operator endpoint is set: its statement also enqueues
// delivery.exhausted (exhaustedCTE), so the notice commits if and only if
// the mark does, and says whether the operator endpoint refused it.
var markExhaustedSQL = markStatement(exhaustedCTE, exhaustedColumns)

// markStatement is markSQL with more CTEs after the mark's (ctes, each
// starting with a comma) and more columns at the end of its row.
func markStatement(ctes, columns string) string {
	return `WITH attempt AS (
	INSERT INTO webhook_delivery_attempts (delivery_id, attempt, status_code, duration_ms, error, response_excerpt)
	SELECT $1::uuid, $2::int, NULLIF($3::int, 0), $4::int, NULLIF($5::text, ''), $6::text
	WHERE $2::int > 0
), ` + breakerSuccessCTE(`$9::uuid AND $12::bool AND $7 = 'succeeded'`, markBreakerParams) + `,
` + breakerFailureCTE(`$9::uuid AND $12::bool AND $7 <> 'succeeded'`, markBreakerParams) + `,
marked AS (
	UPDATE webhook_deliveries SET
		status        = $7::text,
		last_error    = NULLIF($5, ''),
		next_retry_at = CASE WHEN $7 = 'pending' THEN now() + $8::interval ELSE next_retry_at END,
		leased_until  = NULL,
		delivered_at  = CASE WHEN $7 = 'succeeded' THEN now() END
	WHERE id = $1 AND status = 'pending'
	RETURNING id, endpoint_id, ordering_key, ordering_seq
), ` + handOnCTE + ctes + `
SELECT EXISTS (SELECT 1 FROM marked), coalesce((SELECT closes FROM breaker_success), false),
	(SELECT breaker_window_at FROM breaker_success WHERE closes),
	coalesce(f.trips, false), coalesce(f.requests, 0), coalesce(f.failures, 0), f.paused_until, coalesce(f.expire, false),
	d.attempts, d.left, ` + loadColumns + `, d2.id::text, d2.attempts, d2.left` + columns + `
FROM (SELECT 1) one LEFT JOIN breaker_failure f ON true LEFT JOIN handed d ON true LEFT JOIN handed_after d2 ON true
LEFT JOIN webhook_events e ON e.id = d.event_id LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id`
}

// markBreakerParams are markSQL's breaker parameters.
var markBreakerParams = breakerParams{probes: "$10", window: "$11", minRequests: "$13", rate: "$14",
	cooldown: "$15", maxCooldown: "$16", disableAfter: "$17", unprovenCap: "$20"}

// The breaker's CTEs read the endpoint row with a lock first and write
// it from what that read returned, never from the UPDATE's own ep.*
// columns. When the lock waited for another replica's mark to commit, the
// read returns the row as that mark left it, but the UPDATE's ep.* can
// still be the older version of the statement's snapshot: counts from one
// version and the window from another broke the counts' check, and a
// delivered mark was lost (TestBreaker_MarkWaitingOnAnotherMarkCountsOnItsResult).
// The fan-out's unproven_spent writes from its locked read the same way.

// breakerFailureCTE is the CTEs, named breaker_failure last, that count
// one failed attempt of the endpoint whose id = match (an SQL condition
// on the bare row's id, as breakerSuccessCTE's), its SQL parameters named
// by b. The row is locked and read first, so the counts build on the
// latest ones. breaker_failure returns whether the failure opened the
// breaker, the window's counts, the pause, and whether the endpoint has
// failed for the whole disable window.
func breakerFailureCTE(match string, b breakerParams) string {
	return `breaker_fold AS (
	SELECT id, breaker_opens, breaker_requests, breaker_failures, breaker_window_at, breaker_recovering, proven_at IS NULL AS unproven,
		consecutive_failures, failing_since, paused_until, probing,
		coalesce(paused_until > clock_timestamp(), false) AS open,
		coalesce(paused_until <= clock_timestamp(), false) AS half_open,
		paused_until IS NULL AND coalesce(breaker_window_at > clock_timestamp() - make_interval(secs => ` + b.window + `::float8), false) AS live
	FROM webhook_endpoints WHERE id = ` + match + ` FOR NO KEY UPDATE
), breaker_counted AS (
	SELECT id, breaker_opens, open, half_open, unproven, consecutive_failures, failing_since, paused_until, probing, breaker_recovering,
		CASE WHEN open THEN breaker_requests WHEN half_open OR live THEN breaker_requests + 1
			WHEN breaker_recovering THEN ` + b.probes + `::int + 1 ELSE 1 END AS requests,
		CASE WHEN open THEN breaker_failures WHEN half_open OR live THEN breaker_failures + 1 ELSE 1 END AS failures,
		CASE WHEN open OR half_open OR live THEN breaker_window_at ELSE clock_timestamp() END AS window_at
	FROM breaker_fold
), breaker_ft AS (
	SELECT *, NOT open AND failures * 100 >= ` + b.rate + `::int * requests AND (half_open OR requests >= ` + b.minRequests + `::int
		OR unproven AND ` + b.minRequests + `::int < ` + maxBreakerMinRequestsSQL + ` AND requests >= ` + b.unprovenCap + `::int) AS trips
	FROM breaker_counted
), breaker_failure AS (
	UPDATE webhook_endpoints ep SET
		consecutive_failures = t.consecutive_failures + 1,
		failing_since = coalesce(t.failing_since, now()),
		paused_until = CASE WHEN t.trips
			THEN clock_timestamp() + make_interval(secs => least(` + b.cooldown + `::float8 * power(2, t.breaker_opens), ` + b.maxCooldown + `::float8))
			ELSE t.paused_until END,
		breaker_opens = CASE WHEN t.trips THEN least(t.breaker_opens + 1, 30) ELSE t.breaker_opens END,
		breaker_requests = CASE WHEN t.trips THEN 0 ELSE t.requests END,
		breaker_failures = CASE WHEN t.trips THEN 0 ELSE t.failures END,
		breaker_window_at = CASE WHEN t.trips THEN clock_timestamp() ELSE t.window_at END,
		probing = CASE WHEN t.trips THEN false ELSE t.probing END,
		breaker_recovering = t.breaker_recovering AND NOT t.trips
	FROM breaker_ft t WHERE ep.id = t.id
	RETURNING t.trips, t.requests, t.failures, ep.paused_until, ep.enabled AND ep.failing_since <= now() - ` + b.disableAfter + `::interval AS expire
)`
}

// breakerParams names the SQL parameters of the breaker's settings;
// unprovenCap is Settings.Concurrency: an endpoint that has never accepted
// a delivery opens once that many attempts are counted (it gets no more
// first attempts than that: bornSQL), not BreakerMinRequests — unless the
// breaker is switched off.
type breakerParams struct {
	probes, window, minRequests, rate, cooldown, maxCooldown, disableAfter, unprovenCap string
}

// maxBreakerMinRequestsSQL is maxBreakerMinRequests in SQL: the minimum
// that switches the breaker off.
var maxBreakerMinRequestsSQL = strconv.Itoa(maxBreakerMinRequests)

// breakerSuccessCTE is the CTEs, named breaker_success last, that count
// one success of the endpoint whose id = match (an SQL condition on the
// bare row's id: "$9::uuid AND …"), its SQL parameters named by b: the
// probes' successes that close a tripped breaker, the window's length in
// seconds. A success in a window not yet over is counted; one
// after it clears the counts; a tripped breaker's success counts toward
// closing it, even one that arrives while it is open (the endpoint
// answers). A success proves an unproven endpoint (proven_at). A proven
// endpoint the breaker does not watch is neither locked nor written.
// breaker_success returns whether it closes the breaker, and the window's
// start, which for a breaker that closes is when it last opened (the
// opening starts the trial's window).
func breakerSuccessCTE(match string, b breakerParams) string {
	return `breaker_old AS (
	SELECT id, paused_until IS NOT NULL AS tripped, breaker_recovering AS recovering,
		proven_at, paused_until, breaker_opens, probing, breaker_window_at,
		coalesce(breaker_window_at > clock_timestamp() - make_interval(secs => ` + b.window + `::float8), false) AS live,
		breaker_requests, breaker_failures, breaker_requests + 1 AS requests, breaker_failures AS failures
	FROM webhook_endpoints
	WHERE id = ` + match + ` AND (` + breakerWatchingRow + ` OR proven_at IS NULL)
	FOR NO KEY UPDATE
), breaker_t AS (
	SELECT *, tripped AND requests - failures >= ` + b.probes + `::int AS closes,
		NOT tripped AND NOT live AS ended,
		recovering AND NOT live AND breaker_requests - breaker_failures >= ` + b.minRequests + `::int
			AND breaker_failures * 200 < ` + b.rate + `::int * breaker_requests AS recovered
	FROM breaker_old
), breaker_success AS (
	UPDATE webhook_endpoints ep SET
		consecutive_failures = 0, failing_since = NULL, proven_at = coalesce(t.proven_at, now()),
		paused_until = CASE WHEN t.closes THEN NULL ELSE t.paused_until END,
		breaker_opens = CASE WHEN t.recovered THEN 0 ELSE t.breaker_opens END,
		probing = CASE WHEN t.closes THEN false ELSE t.probing END,
		breaker_recovering = CASE WHEN t.closes THEN true WHEN t.recovered THEN false ELSE t.recovering END,
		breaker_requests = CASE WHEN t.closes THEN t.requests - t.failures
			WHEN t.ended AND t.recovering AND NOT t.recovered THEN ` + b.probes + `::int + 1
			WHEN t.ended THEN 0 ELSE t.requests END,
		breaker_failures = CASE WHEN t.closes OR t.ended THEN 0 ELSE t.failures END,
		breaker_window_at = CASE WHEN t.closes OR t.ended AND t.recovering AND NOT t.recovered THEN clock_timestamp()
			WHEN t.ended THEN NULL ELSE t.breaker_window_at END
	FROM breaker_t t WHERE ep.id = t.id
	RETURNING t.closes, t.breaker_window_at
)`
}

// Mark records one attempt and applies its mark. It runs on a
// context detached from ctx's cancellation and bounded by
// leases.MarkTimeout: an attempt already made is always recorded, even when
// the batch that made it has been cancelled.
//
// It returns ErrStaleMark when the delivery was no longer pending
// (the attempt is still logged). Callers log and count it; none discards it.
// It counts nothing toward a breaker and tells the operator endpoint
// nothing: those are a Dispatcher's marks'.
func Mark(ctx context.Context, db DB, deliveryID string, m Result) error {
	_, _, err := markDelivery(ctx, db, nil, deliveryID, m, nil)
	return err
}

// breakerCount is what a Dispatcher's mark does beside the CAS: count the
// attempt toward the endpoint's circuit breaker (the endpoint, whether the
// attempt counts, the Dispatcher's breaker settings) and, given a lease,
// hand an ordered key on (handOnCTE) past the deliveries the attempt
// leased ahead (ahead, their ids).
type breakerCount struct {
	endpointID string
	url        string // the attempt's, which delivery.exhausted names (redacted)
	counts     bool
	settings   Settings
	handOn     time.Duration
	ahead      []string
}

// markParams are markSQL's parameters by name; args puts them in the
// statement's order, the one place that order is spelled out.
type markParams struct {
	DeliveryID   string        // $1
	Attempt      int           // $2: the attempt logged; 0 logs none
	StatusCode   int           // $3
	DurationMS   int64         // $4
	Error        string        // $5: last_error and the log's error
	Excerpt      *string       // $6: nil when there was no response
	Status       string        // $7: the status the mark writes
	RetryIn      time.Duration // $8
	EndpointID   *string       // $9: the breaker's endpoint; nil counts nothing
	Probes       int           // $10
	WindowSecs   float64       // $11
	Counts       bool          // $12: the attempt counts for the breaker
	MinRequests  int           // $13
	FailureRate  int           // $14
	CooldownSecs float64       // $15
	MaxCoolSecs  float64       // $16
	DisableAfter time.Duration // $17
	HandOn       time.Duration // $18: the lease of a hand-on; 0 hands nothing on
	Ahead        []string      // $19: the deliveries the chain leased ahead
	UnprovenCap  int           // $20

	// markExhaustedSQL's alone: nil for markSQL.
	OpsEndpointID *string // $21: the operator endpoint
	URL           string  // $22: the endpoint's url, redacted
}

func (a markParams) args() []any {
	args := []any{a.DeliveryID, a.Attempt, a.StatusCode, a.DurationMS, a.Error,
		a.Excerpt, a.Status, a.RetryIn, a.EndpointID,
		a.Probes, a.WindowSecs, a.Counts, a.MinRequests, a.FailureRate,
		a.CooldownSecs, a.MaxCoolSecs, a.DisableAfter, a.HandOn, a.Ahead, a.UnprovenCap}
	if a.OpsEndpointID != nil {
		args = append(args, a.OpsEndpointID, a.URL)
	}
	return args
}

// deliveryMark is the claim.Mark of r for delivery id: the attempt's
// log, the CAS, and — given b — the breaker's count and the hand-on, in
// one statement (markSQL). A failure for good of a delivery b's settings
// tell the operator endpoint of also enqueues delivery.exhausted
// (markExhaustedSQL): notices says so.
func deliveryMark(id string, r Result, b *breakerCount) (m *claim.Mark, notices bool, err error) {
	status := r.Outcome.status()
	if status == "" {
		return nil, false, fmt.Errorf("webhook: update delivery %s: unknown outcome %q", id, r.Outcome)
	}
	s := Settings{}.withDefaults()
	p := markParams{DeliveryID: id, Attempt: r.Attempt, StatusCode: r.StatusCode, DurationMS: max(r.Duration.Milliseconds(), 0),
		Error: pgtext.LastError(r.Error), Excerpt: nullIfEmpty(r.Excerpt, r.StatusCode), Status: string(status), RetryIn: r.RetryIn,
		Ahead: []string{}}
	if b != nil {
		p.EndpointID, p.Counts, s, p.HandOn = &b.endpointID, b.counts && r.Attempt > 0, b.settings, b.handOn
		if b.ahead != nil {
			p.Ahead = b.ahead
		}
	}
	p.Probes, p.WindowSecs, p.MinRequests, p.FailureRate = s.BreakerProbes, s.BreakerWindow.Seconds(), s.BreakerMinRequests, s.BreakerFailureRate
	p.CooldownSecs, p.MaxCoolSecs, p.DisableAfter, p.UnprovenCap = s.BreakerCooldown.Seconds(), s.BreakerMaxCooldown.Seconds(), s.DisableAfter, s.Concurrency
	sql := markSQL
	if notices = b != nil && r.Outcome == OutcomeFailed && b.settings.notifies(b.endpointID); notices {
		sql, p.OpsEndpointID, p.URL = markExhaustedSQL, &b.settings.OpsEndpointID, redactURL(b.url)
	}
	m = &claim.Mark{Table: deliveriesTable, ID: id, Outcome: string(r.Outcome), SQL: sql, Args: p.args(), Until: r.Until,
		Wrap: func(err error) error { return fmt.Errorf("webhook: update delivery %s: %w", id, err) }}
	if r.Outcome != OutcomeRetry {
		m.Lands = string(status)
	}
	return m, notices, nil
}

// markDelivery is Mark through group (the Dispatcher's group commit; nil:
// a statement of its own on db, claim.MarkAlone) that, given b, counts the
// attempt toward b's endpoint breaker in the same statement and says what
// that did, and hands an ordered key on (next: the deliveries it claimed,
// in their order; none when it handed nothing on). A mark that finds its
// own lost commit (claim.Mark.Lands) hands nothing on: a delivery that
// commit handed the key on to waits out its lease for the retry lane.
func markDelivery(ctx context.Context, db DB, group *claim.Group, deliveryID string, r Result, b *breakerCount) (out breakerOutcome, next []handedOn, err error) {
	m, notices, err := deliveryMark(deliveryID, r, b)
	if err != nil {
		return out, nil, err
	}
	m.Result = func(row pgx.Row) error {
		var (
			marked   bool
			h, after handedOn
			n, n2    *int
			id2      *string
			l        loaded
		)
		out, next = breakerOutcome{}, nil
		targets := append(append([]any{&marked, &out.closed, &out.closedPause, &out.opened, &out.requests, &out.failures, &out.pausedUntil, &out.expire,
			&n, &h.left}, l.targets()...), &id2, &n2, &after.left)
		if notices {
			targets = append(targets, &out.opsRefused)
		}
		err := row.Scan(targets...)
		if err == nil && l.id != nil {
			// A delivery whose columns do not make an attempt is
			// loaded again (loadHanded), which releases it if
			// it still cannot: the mark itself stands.
			var derr error
			h.d, derr = l.delivery(map[string]event{})
			h.id, h.attempt, h.loaded = *l.id, *n, derr == nil
			next = append(next, h)
		}
		if err == nil && id2 != nil {
			// Read when its turn comes (loadHanded), while the
			// one before it is out.
			after.id, after.attempt = *id2, *n2
			next = append(next, after)
		}
		if err == nil && !marked {
			return fmt.Errorf("%w (delivery %s)", ErrStaleMark, deliveryID)
		}
		return err
	}
	if group != nil {
		err = group.Mark(ctx, m)
	} else {
		err = claim.MarkAlone(ctx, db, m)
	}
	return out, next, err
}

// nullIfEmpty stores NULL for "no response" and an empty string for an empty body.
func nullIfEmpty(excerpt string, statusCode int) *string {
	if excerpt == "" && statusCode == 0 {
		return nil
	}
	return &excerpt
}
