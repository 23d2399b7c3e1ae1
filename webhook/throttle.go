package webhook

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Pool-wide admission: the per-endpoint rate limit and in-flight cap, and
// the circuit breaker's probes, are decided in the database by the
// retry claim, so a limit of 10/s is 10/s across every replica.
//
// A claim runs in one short transaction:
//
//  1. candidates: due pending deliveries, FOR UPDATE OF the delivery SKIP
//     LOCKED, of enabled endpoints whose breaker is not pausing them, whose
//     bucket (read without a lock) holds a token and whose in-flight count
//     is under its cap. The rows of a throttled endpoint are skipped there,
//     not waited on, so they never hold back an unlimited endpoint's rows
//     behind them (they cost the claim's scan a look each).
//  2. admission, only for the candidates' endpoints that have a limit or
//     a tripped breaker: their rows are locked (FOR NO KEY UPDATE, in id
//     order, so two claims never deadlock), then — in a fresh statement,
//     whose READ COMMITTED snapshot sees what the previous lock holder
//     committed — their leased deliveries are counted. The bucket refills
//     at rate_limit per second up to burstSeconds' worth (at least one
//     token) and each admitted delivery takes one; max_in_flight caps the
//     leased deliveries; a half-open breaker caps them at its probe slots
//     (one, and one more per successful probe: breaker.go), and fills them
//     first with deliveries attempted before, wherever they are in the
//     claim's order (probesSQL).
//  3. admitted rows are claimed (attempts + 1, lease stamped on
//     next_retry_at and leased_until); the rest are throttled, attempts
//     untouched, so a throttled delivery waits without burning an attempt:
//     those the bucket held back — with every other due row of the
//     endpoint — are pushed to about when it will hold a token for them
//     (so they leave the head of the claim's index); those
//     the in-flight cap or the probe slots held back stay due, and step 1
//     skips them until a slot frees.
//
// A replica that dies holding leases frees its in-flight count when they
// expire (leased_until is in the past): at most one claim lease
// (RetryClaimLease) or birth lease later.
const (
	// burstSeconds bounds a bucket to half a second's worth of tokens
	// (at least one): over any window of T seconds an endpoint gets at most
	// rate×T plus that burst. Smaller loses tokens whenever the lanes claim
	// less often than the bucket fills — on a loaded machine a tenth of a
	// second's worth delivered three quarters of the limit.
	burstSeconds = 0.5

	// maxThrottlePush bounds how far one throttled row is pushed.
	maxThrottlePush = time.Minute
)

// needsAdmission is the SQL test of an endpoint (alias ep) that the claim
// must admit deliveries to one by one: it has a limit, or its breaker
// tripped (open or half-open) or is recovering (limitedOrTripped), or it
// has never accepted a delivery (unproven: see bucket.admit).
const needsAdmission = `(` + limitedOrTripped + ` OR ep.proven_at IS NULL)`

// limitedOrTripped is needsAdmission but for an unproven endpoint, whose
// first deliveries the fan-out still births leased, up to its cap
// (bornSQL).
const limitedOrTripped = `(ep.rate_limit IS NOT NULL OR ep.max_in_flight IS NOT NULL OR ep.paused_until IS NOT NULL OR ep.breaker_recovering)`

// failedWaitingOf is the SQL count, up to $6, of endpoint ep's deliveries
// attempted, failed and not leased again: waiting for their retry, or
// due for it. Read through the probe index (migration 00021).
const failedWaitingOf = `(SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries w
		WHERE w.endpoint_id = ep.id AND w.status = 'pending' AND w.last_error IS NOT NULL AND w.attempts > 0
			AND NOT coalesce(w.leased_until > now(), false)
		LIMIT $6) w)`

// inFlightOf is the SQL count of endpoint ep's leased deliveries.
const inFlightOf = `(SELECT count(*) FROM webhook_deliveries f
		WHERE f.endpoint_id = ep.id AND f.status = 'pending' AND f.leased_until > now())`

// probeSlots is the SQL count of the probes a half-open breaker lets out
// at once: one, and one more for each probe of this trial that succeeded,
// up to $2 (Settings.BreakerProbes) in both statements that use it.
const probeSlots = `least(1 + breaker_requests - breaker_failures, $2::int)`

// claimCandidatesSQL is step 1: $1 rows at most, $2 the breaker's probes,
// $3 the claim window's edge (claim.Window), $4 and $5 the breaker's
// opening rate and window (firstAttemptFits), $6 the first attempts an
// unproven endpoint may have unresolved (Settings.Concurrency): its first
// attempts are skipped while that many are, as a recovering endpoint's
// are while its slow start lets none out; $7 endpoints whose deliveries
// this claim leaves (crowdedEndpoints).
var claimCandidatesSQL = func() string {
	due, order := deliveriesTable.Due("d", "$3")
	return fmt.Sprintf(`SELECT d.id, d.endpoint_id, %s
FROM webhook_deliveries d
JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
WHERE d.status = 'pending' AND %s
	AND ep.enabled
	AND (ep.paused_until IS NULL OR (ep.paused_until <= now() AND %s > %s))
	AND (NOT ep.breaker_recovering OR d.attempts > 0 OR %s)
	AND (ep.proven_at IS NOT NULL OR d.attempts > 0 OR %s + %s < $6::int)
	AND (ep.rate_limit IS NULL OR ep.rl_tokens + greatest(EXTRACT(EPOCH FROM now() - ep.rl_at), 0) * ep.rate_limit >= 1)
	AND (ep.max_in_flight IS NULL OR ep.max_in_flight > %s)
	AND NOT %s
	AND d.endpoint_id <> ALL (coalesce($7::uuid[], '{}'))
ORDER BY %s
LIMIT $1
FOR UPDATE OF d SKIP LOCKED`, needsAdmission, due, probeSlots, inFlightOf, firstAttemptFits, inFlightOf, failedWaitingOf, inFlightOf, deliveryWaitsSQL("d"), order)
}()

// firstAttemptFits is the SQL test, in claimCandidatesSQL, that recovering
// endpoint ep would let one more first attempt out now
// (bucket.firstAttempts is at least one): $2 BreakerProbes, $4 the opening
// rate, $5 BreakerWindow in seconds. Its first attempts are skipped while
// it would not, as a half-open endpoint's rows are while its probe slots
// are full, so a backlog of them cannot fill the claim and starve other
// endpoints' rows behind them.
var firstAttemptFits = func() string {
	live := breakerLive("ep.", "$5")
	successes := `CASE WHEN ` + live + ` THEN ep.breaker_requests - ep.breaker_failures ELSE $2::int END`
	failures := `CASE WHEN ` + live + ` THEN ep.breaker_failures ELSE 0 END`
	return `(` + failures + ` + ` + inFlightOf + ` + 1) * 100 < $4::int * (` + successes + ` + ` + failures + ` + ` + inFlightOf + ` + 1)`
}()

// breakerLive is the SQL test that the breaker's counts, on the endpoint
// row named by alias ("ep." or ""), are of a window not yet over: window
// is the parameter holding BreakerWindow in seconds.
func breakerLive(alias, window string) string {
	return `coalesce(` + alias + `breaker_window_at > clock_timestamp() - make_interval(secs => ` + window + `::float8), false)`
}

// Step 2's statements. The lock returns the latest committed bucket (a
// locking read in READ COMMITTED follows the row to its newest version);
// the count runs after the lock is held.
var admitLockSQL = `SELECT id, rate_limit, max_in_flight, rl_tokens,
	greatest(EXTRACT(EPOCH FROM clock_timestamp() - rl_at), 0)::float8,
	paused_until IS NOT NULL,
	coalesce(paused_until > clock_timestamp(), false),
	` + probeSlots + `,
	breaker_recovering,
	CASE WHEN ` + breakerLive("", "$3") + ` THEN breaker_requests - breaker_failures ELSE $2::int END,
	CASE WHEN ` + breakerLive("", "$3") + ` THEN breaker_failures ELSE 0 END,
	proven_at IS NULL
FROM webhook_endpoints WHERE id = ANY ($1::uuid[]) ORDER BY id FOR NO KEY UPDATE`

const (
	inFlightSQL = `SELECT endpoint_id, count(*) FROM webhook_deliveries
WHERE endpoint_id = ANY ($1::uuid[]) AND status = 'pending' AND leased_until > clock_timestamp()
GROUP BY endpoint_id`

	// failedWaitingSQL is failedWaitingOf for endpoint $1, up to $2.
	failedWaitingSQL = `SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries
WHERE endpoint_id = $1 AND status = 'pending' AND last_error IS NOT NULL AND attempts > 0
	AND NOT coalesce(leased_until > clock_timestamp(), false)
LIMIT $2) w`

	// probing marks a half-open breaker whose probes have gone out. A
	// probe holds its slot for its lease: one whose replica died frees
	// the slot when the lease expires.
	admitUpdateSQL = `UPDATE webhook_endpoints ep SET
	rl_tokens = CASE WHEN ep.rate_limit IS NULL THEN ep.rl_tokens ELSE u.tokens END,
	rl_at = clock_timestamp(),
	probing = ep.probing OR u.probe
FROM unnest($1::uuid[], $2::float8[], $3::bool[]) AS u(id, tokens, probe)
WHERE ep.id = u.id`

	// probesSQL picks up to $2 of endpoint $1's due deliveries that were
	// attempted and failed, oldest due first: a half-open breaker's
	// probes. An endpoint that fails every first attempt answers these,
	// and a probe that is a first attempt would reopen its breaker each
	// time. SKIP LOCKED leaves rows another claim holds (waiting on them
	// while holding the endpoint's lock could deadlock); this claim's own
	// candidates are not skipped. The predicate is the probe index's
	// (migration 00021).
	probesSQL = `SELECT id FROM webhook_deliveries
WHERE endpoint_id = $1 AND status = 'pending' AND last_error IS NOT NULL AND attempts > 0 AND next_retry_at <= now()
ORDER BY next_retry_at
LIMIT $2
FOR UPDATE SKIP LOCKED`
)

// Step 3's statements.
var (
	claimAdmittedSQL = `WITH lease AS (SELECT clock_timestamp() + $2::interval AS until)
UPDATE webhook_deliveries d SET ` + claim.Set("d", "lease.until", "next_retry_at", "leased_until") + `
FROM lease
WHERE d.id = ANY ($1::uuid[])
RETURNING ` + deliveriesTable.Returning

	// throttleSQL pushes every due row of a rate-limited endpoint ($1)
	// the claim did not admit ($4) — up to maxThrottleRows, not only this
	// claim's candidates — spread at its rate ($2): the k-th to k/rate
	// seconds from now, at most $3. One claim clears a throttled backlog
	// off the head of the claim index, so later claims do not scan it.
	// SKIP LOCKED leaves rows another claim holds (this claim's own
	// candidates are locked by it already): waiting on them while holding
	// the endpoint's lock could deadlock.
	throttleSQL = func() string {
		due, order := deliveriesTable.Due("", "")
		_, dueOrder := deliveriesTable.Due("due", "")
		return fmt.Sprintf(`UPDATE webhook_deliveries d
SET next_retry_at = clock_timestamp() + make_interval(secs => least(q.k / $2::float8, $3::float8))
FROM (SELECT id, row_number() OVER (ORDER BY %s) AS k FROM (
	SELECT id, next_retry_at FROM webhook_deliveries
	WHERE endpoint_id = $1 AND status = 'pending' AND %s
		AND id <> ALL ($4::uuid[])
	ORDER BY %s
	LIMIT $5
	FOR UPDATE SKIP LOCKED) due) q
WHERE d.id = q.id`, dueOrder, due, order)
	}()
)

// maxThrottleRows bounds one push.
const maxThrottleRows = 10000

// bucket is one endpoint's admission state under its row lock.
type bucket struct {
	id          string
	rate        *float64
	maxInFlight *int
	tokens      float64
	elapsed     float64 // seconds since the bucket was last taken from
	tripped     bool    // the breaker is open or half-open
	paused      bool    // open: its pause is not over
	probeSlots  int     // half-open: the probes it lets out at once
	inFlight    int

	// recovering: the breaker closed and first attempts go out in a slow
	// start (firstAttempts), counted on the window's successes and
	// failures.
	recovering          bool
	successes, failures int

	// unproven: the endpoint has never accepted a delivery. Its first
	// attempts go out only while fewer than the cap of its deliveries are
	// attempted and unresolved (in flight, or failed and waiting for a
	// retry): failedWaiting is the second part of that count.
	unproven      bool
	failedWaiting int
}

// firstAttempts is how many first attempts a recovering breaker lets out
// now: as many as could all fail, with every attempt in flight failing
// too, and leave the window's failed share under rate percent — so first
// attempts alone never reopen it, and each success lets out rate ÷ (100 −
// rate) more (four at the default 80 %). An endpoint that fails every
// first attempt and accepts the retry goes on at about half its requests
// failed, below the rate. Counts whose window has ended read as the
// breaker's closing ones (BreakerProbes successes, no failure), so failures
// with no retry to come hold first attempts for one window at most.
func (b bucket) firstAttempts(rate int) int {
	if rate >= 100 { // only every attempt failing reopens it
		if b.successes > 0 {
			return math.MaxInt32
		}
		return 0
	}
	// (failures + inFlight + n) × 100 < rate × (successes + failures + inFlight + n)
	n := (rate*b.successes-(100-rate)*(b.failures+b.inFlight)+(100-rate)-1)/(100-rate) - 1
	return max(n, 0)
}

// admit decides how many of want deliveries bucket b lets through now,
// and what it leaves: the tokens left, whether those admitted are the
// breaker's probes, and whether the bucket's tokens were what held the
// rest back (they are then pushed to when tokens will be there; rows held
// by the in-flight cap or the breaker stay due, and the candidates'
// filter skips them while the cap, the probe slots or the pause last).
//
// attempted is how many of want, placed first, were attempted before: a
// recovering breaker lets those through and holds first attempts to
// firstAttempts(rate), counting those retries as in flight.
//
// An unproven endpoint — one that has never accepted a delivery — lets
// its retries through, and first attempts only while fewer than unproven
// of its deliveries are attempted and unresolved, pool-wide: a new
// endpoint that answers every request with a 500 gets at most that many
// first attempts, however many replicas fan out to it, and its breaker
// opens once they have failed (breakerFailureCTE). Its first 2xx proves it (proven_at, set by that
// attempt's mark), and from then on its deliveries are born leased.
func (b bucket) admit(want, attempted, rate, unproven int) (n int, tokens float64, probe, byRate bool) {
	if b.paused {
		return 0, b.tokens, false, false
	}
	n = want
	if b.recovering {
		withRetries := b
		withRetries.inFlight += min(attempted, want)
		n = min(want, attempted+withRetries.firstAttempts(rate))
	}
	if b.unproven {
		n = min(n, attempted+max(unproven-b.inFlight-b.failedWaiting, 0))
	}
	tokens = b.tokens
	if b.rate != nil {
		burst := math.Max(1, *b.rate*burstSeconds)
		tokens = math.Min(burst, tokens+b.elapsed**b.rate)
		n = min(n, int(math.Floor(tokens)))
		byRate = n < want
	}
	if b.maxInFlight != nil {
		if free := max(*b.maxInFlight-b.inFlight, 0); free < n {
			n, byRate = free, false
		}
	}
	if b.tripped {
		if free := max(b.probeSlots-b.inFlight, 0); free < n {
			n, byRate = free, false
		}
		probe = n > 0
	}
	if b.rate != nil {
		tokens -= float64(n)
	}
	return n, tokens, probe, byRate
}

type candidate struct {
	id, endpointID string
	admission      bool
}

// claimAdmitted is the retry lane's claim: up to n due deliveries, through
// the pool-wide admission above, with lease, in one transaction, none of
// the endpoints in skip. It returns the claimed rows and how many it
// throttled.
func (p *Dispatcher) claimAdmitted(ctx context.Context, n int, lease time.Duration, skip []string) (claimed []claimedDelivery, throttled int, err error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil, 0, wrapClaim(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	edge, token := p.retryWindow.Start()
	b := &pgx.Batch{}
	b.Queue(claim.IndexOnlySQL) // for the whole claim: see there
	b.Queue(claimCandidatesSQL, n, p.cfg.BreakerProbes, edge, p.cfg.BreakerFailureRate, p.cfg.BreakerWindow.Seconds(), p.cfg.Concurrency, skip)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, 0, wrapClaim(err)
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, 0, wrapClaim(err)
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
		var c candidate
		err := row.Scan(&c.id, &c.endpointID, &c.admission)
		return c, err
	})
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, wrapClaim(err)
	}
	if len(cands) > 0 {
		if claimed, throttled, err = p.admit(ctx, tx, cands, lease); err != nil {
			return nil, 0, err
		}
	}
	// With or without candidates, the edge moves only up to what admission
	// holds back: a capped, paused or tokenless endpoint's deliveries are
	// due the moment it opens.
	advance, err := p.nextInRetryWindow(ctx, tx, edge, token)
	if err != nil {
		return nil, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, 0, wrapClaim(err)
	}
	advance()
	return claimed, throttled, nil
}

// admit runs steps 2 and 3 on the candidates in the claim's transaction.
func (p *Dispatcher) admit(ctx context.Context, tx pgx.Tx, cands []candidate, lease time.Duration) (claimed []claimedDelivery, throttled int, err error) {
	admitted := make([]string, 0, len(cands))
	want := map[string][]string{} // endpoint → its candidates, in claim order
	for _, c := range cands {
		if c.admission {
			want[c.endpointID] = append(want[c.endpointID], c.id)
		} else {
			admitted = append(admitted, c.id)
		}
	}
	type push struct {
		endpointID string
		rate       float64
		admitted   []string
	}
	var pushes []push
	if len(want) > 0 {
		buckets, err := lockBuckets(ctx, tx, want, p.cfg.BreakerProbes, p.cfg.BreakerWindow)
		if err != nil {
			return nil, 0, err
		}
		var ids []string
		var tokens []float64
		var probes []bool
		for _, b := range buckets {
			ds, attempted := want[b.id], 0
			if b.recovering || b.unproven {
				if ds, attempted, err = attemptedFirst(ctx, tx, b.id, ds, len(ds)); err != nil {
					return nil, 0, err
				}
			}
			if b.unproven {
				if err := tx.QueryRow(ctx, failedWaitingSQL, b.id, p.cfg.Concurrency).Scan(&b.failedWaiting); err != nil {
					return nil, 0, wrapClaim(err)
				}
			}
			k, left, probe, byRate := b.admit(len(ds), attempted, p.cfg.BreakerFailureRate, p.cfg.Concurrency)
			if probe {
				if ds, _, err = attemptedFirst(ctx, tx, b.id, ds, k); err != nil {
					return nil, 0, err
				}
			}
			admitted = append(admitted, ds[:k]...)
			if byRate {
				pushes = append(pushes, push{b.id, *b.rate, ds[:k]})
			}
			if len(ds) > k {
				p.metrics.throttled(b.id, len(ds)-k)
			}
			ids, tokens, probes = append(ids, b.id), append(tokens, left), append(probes, probe)
		}
		if _, err := tx.Exec(ctx, admitUpdateSQL, ids, tokens, probes); err != nil {
			return nil, 0, wrapClaim(err)
		}
	}
	throttled = max(len(cands)-len(admitted), 0)
	for _, pu := range pushes {
		if _, err := tx.Exec(ctx, throttleSQL, pu.endpointID, pu.rate, maxThrottlePush.Seconds(), pu.admitted, maxThrottleRows); err != nil {
			return nil, 0, wrapClaim(err)
		}
	}
	if len(admitted) > 0 {
		rows, err := tx.Query(ctx, claimAdmittedSQL, admitted, lease)
		if err != nil {
			return nil, 0, wrapClaim(err)
		}
		if claimed, err = pgx.CollectRows(rows, pgx.RowToStructByPos[claimedDelivery]); err != nil {
			return nil, 0, wrapClaim(err)
		}
	}
	return claimed, throttled, nil
}

// nextInRetryWindow reads, in the claim's transaction after its leases and
// pushes, where the retry window's edge may move: up to the first delivery
// of an enabled endpoint still due in the window — one admission held back
// (the in-flight cap, the breaker's probe, an empty bucket), one another
// claim held locked — or to Margin behind now (claim.Window.Advance). The
// caller moves it once the claim has committed: a claim rolled back leaves
// its rows due behind where the edge would have gone.
func (p *Dispatcher) nextInRetryWindow(ctx context.Context, tx pgx.Tx, edge time.Time, token uint64) (advance func(), err error) {
	var now time.Time
	var due *time.Time
	if err := tx.QueryRow(ctx, deliveriesTable.NextSQL(), edge).Scan(&now, &due); err != nil {
		return nil, wrapClaim(err)
	}
	var next time.Time
	if due != nil {
		next = *due
	}
	return func() { p.retryWindow.Advance(token, now, next) }, nil
}

// attemptedFirst returns the candidates ds of an endpoint with up to k
// deliveries attempted before put first, in the claim's transaction
// (locked by probesSQL), and how many were: a half-open breaker's probes,
// a recovering one's retries. The candidates left behind stay due.
func attemptedFirst(ctx context.Context, tx pgx.Tx, endpointID string, ds []string, k int) ([]string, int, error) {
	rows, err := tx.Query(ctx, probesSQL, endpointID, k)
	if err != nil {
		return nil, 0, wrapClaim(err)
	}
	first, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, 0, wrapClaim(err)
	}
	rest := slices.DeleteFunc(slices.Clone(ds), func(id string) bool { return slices.Contains(first, id) })
	return append(first, rest...), len(first), nil
}

// lockBuckets locks the endpoints of want and reads their buckets and
// in-flight counts, in id order.
func lockBuckets(ctx context.Context, tx pgx.Tx, want map[string][]string, probes int, window time.Duration) ([]bucket, error) {
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rows, err := tx.Query(ctx, admitLockSQL, ids, probes, window.Seconds())
	if err != nil {
		return nil, wrapClaim(err)
	}
	buckets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (bucket, error) {
		var b bucket
		err := row.Scan(&b.id, &b.rate, &b.maxInFlight, &b.tokens, &b.elapsed, &b.tripped, &b.paused, &b.probeSlots,
			&b.recovering, &b.successes, &b.failures, &b.unproven)
		return b, err
	})
	if err != nil {
		return nil, wrapClaim(err)
	}
	rows, err = tx.Query(ctx, inFlightSQL, ids)
	if err != nil {
		return nil, wrapClaim(err)
	}
	inFlight := map[string]int{}
	var id string
	var c int
	if _, err := pgx.ForEachRow(rows, []any{&id, &c}, func() error { inFlight[id] = c; return nil }); err != nil {
		return nil, wrapClaim(err)
	}
	for i := range buckets {
		buckets[i].inFlight = inFlight[buckets[i].id]
	}
	return buckets, nil
}

func wrapClaim(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("claim webhook_deliveries: %w", err)
}
