package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/pgtext"
)

// Outcome is what a mark records about one attempt at a row.
type Outcome string

const (
	OutcomeSent    Outcome = "sent"    // status dispatched, dispatched_at set, payload scrubbed
	OutcomeSkipped Outcome = "skipped" // the renderer declined; status skipped, payload scrubbed
	OutcomeFailed  Outcome = "failed"  // permanent error or backoff exhausted; waits for Requeue
	OutcomeRetry   Outcome = "retry"   // transient error; stays pending until its backoff slot
)

// verdicts are the outcomes in the engine's words (engine.Verdict).
var verdicts = map[Outcome]engine.Verdict{
	OutcomeSent: engine.Sent, OutcomeSkipped: engine.Skipped, OutcomeFailed: engine.Failed, OutcomeRetry: engine.Retry,
}

// StaleMarkError is the error of a dropped mark: which row, and which
// outcome it would have written.
type StaleMarkError struct {
	ID      string
	Outcome Outcome
}

func (e *StaleMarkError) Error() string {
	return fmt.Sprintf("outbox: stale mark dropped: row %s is no longer pending, so %q was not recorded", e.ID, e.Outcome)
}

// Is makes errors.Is(err, ErrStaleMark) true.
func (e *StaleMarkError) Is(target error) bool {
	return target == ErrStaleMark || target == claim.ErrStale
}

// casGuard makes every mark a compare-and-set: it applies only to a row that
// is still pending (see docs/design/outbox-transport.md, Detached marks). A
// worker whose lease expired cannot overwrite what the sibling that
// re-claimed the row recorded.
const casGuard = `WHERE id = $1 AND status = 'pending'`

// withAttemptLog makes a mark's UPDATE append the attempt it records to
// email_attempts in the same statement, so a row's history costs no round
// trip and a mark that is not applied logs nothing. $n is the claim's
// attempt number (0 from the exported Mark functions: the row's count).
// The log numbers it after the attempts the row made before its requeues
// (prior_attempts), so an attempt after a requeue is never taken for one
// already logged. A claim's number above the row's count is from before a
// requeue reset it (a lease ran out, a sibling failed the row, an operator
// requeued it): the CAS lets that late mark through, as it lets any mark
// of a pending row, but it is not logged under a number the attempts
// after the requeue will need. Every mark returns the row's age in seconds, computed by
// the database so worker clock skew does not distort the enqueue→delivered
// histogram.
//
// The log is partitioned by week (migration 00018), and its unique index
// holds within a week: ON CONFLICT drops a second log of the same attempt
// in the same week. The mark does not look in earlier weeks: a lookup
// across every week is planned partition by partition (3 ms a mark at two
// years of weeks, unprepared, as behind PgBouncer), and the only second
// log it could stop is a mark retried after its commit's reply was lost
// across midnight of a Sunday, UTC: an attempt shown twice.
func withAttemptLog(update string, outcome Outcome, errExpr string, n int) string {
	return fmt.Sprintf(`WITH marked AS (%s
RETURNING id, attempts, prior_attempts, created_at
), logged AS (
INSERT INTO email_attempts (row_id, attempt, outcome, error)
SELECT id, prior_attempts + CASE WHEN $%[2]d::int > 0 THEN $%[2]d::int ELSE attempts END, '%[3]s', %[4]s FROM marked
WHERE $%[2]d::int <= attempts
ON CONFLICT DO NOTHING
)
SELECT extract(epoch FROM now() - created_at)::float8 FROM marked`, update, n, outcome, errExpr)
}

var (
	markDispatchedSQL = withAttemptLog(`UPDATE email_outbox
SET status = 'dispatched', dispatched_at = now(), last_error = NULL, `+scrubSet+`
`+casGuard, OutcomeSent, "NULL", 2)

	markSkippedSQL = withAttemptLog(`UPDATE email_outbox
SET status = 'skipped', last_error = NULL, `+scrubSet+`
`+casGuard, OutcomeSkipped, "NULL", 2)

	markFailedSQL = withAttemptLog(`UPDATE email_outbox
SET status = 'failed', last_error = $2, `+sealSet(3)+`
`+casGuard, OutcomeFailed, "$2::text", 4)

	markRetrySQL = withAttemptLog(`UPDATE email_outbox
SET next_attempt_at = now() + $2::interval, last_error = $3, `+sealSet(4)+`
`+casGuard, OutcomeRetry, "$3::text", 5)

	// markThrottledSQL is the retry mark of a relay's throttling reply: it
	// also counts the attempt in throttles, which the retry budget leaves
	// out (Dispatcher.markFor). Only the mark of the row's current claim
	// ($5 = attempts) counts it, and only once — a mark retried after a
	// lost answer finds its attempt logged — so throttles never passes the
	// attempts it is taken from.
	markThrottledSQL = withAttemptLog(`UPDATE email_outbox
SET last_error = $3, next_attempt_at = now() + $2::interval, `+sealSet(4)+`,
	throttles = throttles + (attempts = $5::int AND NOT EXISTS (SELECT 1 FROM email_attempts a
		WHERE a.row_id = email_outbox.id AND a.attempt = email_outbox.prior_attempts + $5::int AND a.at >= email_outbox.created_at))::int
`+casGuard, OutcomeRetry, "$3::text", 5)
)

// sealSet is the SET clause by which the retry and failed marks seal a
// waiting row's plaintext secret fields in the same UPDATE: parameter $n is
// an object of envelopes merged over the payload (see sealWaiting). An
// empty object leaves the payload as it is, without rewriting it.
func sealSet(n int) string {
	return fmt.Sprintf(`payload = CASE WHEN $%[1]d::jsonb = '{}' THEN payload ELSE payload || $%[1]d::jsonb END`, n)
}

// Mark records what one attempt at row id did, with the dispatcher's CAS
// mark for r.Outcome, as webhook.Mark records a delivery's:
//
//	OutcomeSent     status dispatched, dispatched_at now, last_error cleared, secret payload keys removed
//	OutcomeSkipped  status skipped (the renderer declined), last_error cleared, secret payload keys removed
//	OutcomeFailed   status failed, last_error = r.Err; the payload is kept whole
//	OutcomeRetry    still pending, due again after r.RetryIn, last_error = r.Err
//
// It never touches attempts: the claim is the only place attempts
// increases. r.Attempt is the attempt it logs (0: the row's count). (The
// dispatcher's own retry and failed marks also seal the row's plaintext
// secret fields, when it has keys.) A row no longer pending gives an error
// matching ErrStaleMark.
func Mark(ctx context.Context, db DB, id string, r Result) error {
	var m *claim.Mark
	switch r.Outcome {
	case OutcomeSent:
		m = dispatchedMark(id, r.Attempt)
	case OutcomeSkipped:
		m = skippedMark(id, r.Attempt)
	case OutcomeFailed:
		m = failedMark(id, r.Attempt, r.Err, noSeal)
	case OutcomeRetry:
		m = retryMark(id, r.Attempt, r.RetryIn, r.Err, noSeal)
	default:
		return fmt.Errorf("outbox: mark of row %s: unknown outcome %q", id, r.Outcome)
	}
	_, err := markAlone(ctx, db, m)
	return err
}

// markedStatus is the status each outcome's mark writes: claim.Mark.Lands.
// (A retry mark leaves the row pending and so is never stale on its own
// account.)
var markedStatus = map[Outcome]string{
	OutcomeSent: "dispatched", OutcomeSkipped: "skipped", OutcomeFailed: "failed",
}

// The marks' constructors take the attempt the mark records: the claim's
// number, or 0 when no claim is held (see withAttemptLog). Each is one
// row's claim.Mark, plain data; readAge gives it the reading of its row.

func dispatchedMark(id string, attempt int) *claim.Mark {
	return emailMark(id, OutcomeSent, markDispatchedSQL, id, attempt)
}

func skippedMark(id string, attempt int) *claim.Mark {
	return emailMark(id, OutcomeSkipped, markSkippedSQL, id, attempt)
}

func failedMark(id string, attempt int, cause error, seal json.RawMessage) *claim.Mark {
	return emailMark(id, OutcomeFailed, markFailedSQL, id, lastError(cause), seal, attempt)
}

func retryMark(id string, attempt int, wait time.Duration, cause error, seal json.RawMessage) *claim.Mark {
	return emailMark(id, OutcomeRetry, markRetrySQL, id, wait, lastError(cause), seal, attempt)
}

func throttledMark(id string, attempt int, wait time.Duration, cause error, seal json.RawMessage) *claim.Mark {
	return emailMark(id, OutcomeRetry, markThrottledSQL, id, wait, lastError(cause), seal, attempt)
}

func emailMark(id string, outcome Outcome, sql string, args ...any) *claim.Mark {
	return &claim.Mark{Table: table, ID: id, Outcome: string(outcome), Lands: markedStatus[outcome], SQL: sql, Args: args}
}

// markGroups is the dispatcher's group commit for marks (claim.Group): the
// marks of batches finishing at once share one pipeline and one commit,
// each keeping its own CAS guard, and each retried alone on the connection
// (claim.RetryMark).
type markGroups struct{ *claim.Group }

func newMarkGroups(db DB, maxWriters int, logger *slog.Logger) *markGroups {
	return &markGroups{claim.NewGroup(db, maxWriters, logger)}
}

// mark runs m in the next group, and again if the group failed on the
// connection, until m.Until (claim.Group.Mark). It returns the row's age.
func (g *markGroups) mark(ctx context.Context, m *claim.Mark) (age time.Duration, err error) {
	err = g.Mark(ctx, readAge(m, &age))
	return age, err
}

// markWriters is how many group commits a dispatcher with concurrency
// batches keeps on the wire at once (claim.Writers).
func markWriters(concurrency int) int { return claim.Writers(concurrency) }

// PoolConnections is how many pool connections a Dispatcher of this
// Concurrency keeps busy at once in steady work: its lane's claim and its
// mark writers. Each batch's own reads (a suppression re-check, a release)
// are single short statements that wait for a free connection rather than
// hold one, so they are not counted; nothing in the Dispatcher holds one
// connection while it waits for a second, so a pool of any size cannot
// deadlock it.
func PoolConnections(concurrency int) int {
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	return 1 + markWriters(concurrency)
}

// markAlone runs m as its own statement and commit (claim.MarkAlone): the
// exported Mark, which has no group; the dispatcher groups its marks
// (markGroups). It returns the row's age (enqueue → marked).
func markAlone(ctx context.Context, db DB, m *claim.Mark) (age time.Duration, err error) {
	err = claim.MarkAlone(ctx, db, readAge(m, &age))
	return age, err
}

// readAge makes m read its row's age into age, name a row no longer
// pending in a *StaleMarkError, and name the row in any other error.
func readAge(m *claim.Mark, age *time.Duration) *claim.Mark {
	outcome := Outcome(m.Outcome)
	m.Result = func(row pgx.Row) error {
		var ageSeconds float64
		err := row.Scan(&ageSeconds)
		if errors.Is(err, pgx.ErrNoRows) {
			return &StaleMarkError{ID: m.ID, Outcome: outcome}
		}
		*age = time.Duration(ageSeconds * float64(time.Second))
		return err
	}
	m.Wrap = func(err error) error {
		return fmt.Errorf("outbox: %s mark of row %s: %w", outcome, m.ID, err)
	}
	return m
}

// lastError is cause as last_error stores it (pgtext.LastError): a relay's
// reply may hold NUL or invalid UTF-8, and a refused value would fail the
// mark on every attempt, so the row would never be recorded.
func lastError(err error) string {
	if err == nil {
		return ""
	}
	return pgtext.LastError(err.Error())
}
