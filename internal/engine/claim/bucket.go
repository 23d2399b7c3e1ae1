package claim

import (
	"fmt"
	"math"
	"time"
)

// Bucket is a pool-wide rate limit on a table's claims: a token bucket in
// postbox_rate_buckets (migration 00020), refilled at Rate tokens a second
// up to Burst, from which every claim takes one token per row it claims,
// in the claim's own transaction. Whatever the number of replicas and
// lanes, the rows claimed over any T seconds are at most Rate×T + Burst.
//
// Each claim passes its own Rate and Burst; the row keeps only the tokens
// and when they were counted. Replicas configured differently (a deploy
// under way) each refill at their own rate: the pool runs at most at the
// highest of them, and nothing breaks.
type Bucket struct {
	Name  string  // the row in postbox_rate_buckets, e.g. "email"
	Rate  float64 // tokens a second, above 0
	Burst float64 // the most tokens it holds, at least 1
}

// Held is what a limited claim learned about its bucket.
type Held struct {
	// Tokens are the tokens left after the claim.
	Tokens float64
	// Short reports that the bucket, not the claim's n, bounded the claim
	// and that the claim took every row it allowed: due rows may be
	// waiting for tokens.
	Short bool
}

// Wait is how long until the bucket holds want tokens, at b's rate.
func (b Bucket) Wait(h Held, want float64) time.Duration {
	if h.Tokens >= want {
		return 0
	}
	return time.Duration((want - h.Tokens) / b.Rate * float64(time.Second))
}

// bucketLockSQL locks bucket $1, making it first if it is missing (an
// ON CONFLICT DO UPDATE locks the row even when its WHERE updates
// nothing). Claims of one bucket take turns from here to their commit,
// and each later one's claim statement, which begins after the lock is
// granted, sees what the earlier one left (READ COMMITTED).
const bucketLockSQL = `INSERT INTO postbox_rate_buckets (name) VALUES ($1)
ON CONFLICT (name) DO UPDATE SET tokens = postbox_rate_buckets.tokens WHERE false`

// bucketLeftSQL reads the tokens the claim left, in its transaction, at
// rate $2 up to burst $3: refilled to now, since a claim that took nothing
// left the row as it found it.
const bucketLeftSQL = `SELECT least($3::float8, tokens + greatest(EXTRACT(EPOCH FROM clock_timestamp() - at), 0) * $2::float8)
FROM postbox_rate_buckets WHERE name = $1`

// bucketLimit is a limited claim's LIMIT: the smaller of its $1 and the
// whole tokens of the CTE bucket (limited).
const bucketLimit = "least($1::int, (SELECT floor(tokens)::int FROM bucket))"

// limited is the claim of the rows ids chooses (rankedClaim), with
// bucketLimit as its LIMIT, through the bucket of parameters $first (rate), $first+1 (burst)
// and $first+2 (name): the bucket is refilled for the time since it was
// last taken from (clock_timestamp(), not now(): the claim's transaction
// began before it waited for the lock), the claim takes at most its whole
// tokens, and the bucket keeps what the claimed rows did not take. A
// claim that took nothing writes nothing: refilling later from the same
// tokens and time comes to the same, and the idle polls and held claims
// of every replica leave no dead versions of the row behind them (a held
// snapshot would keep each one). The bucket must be locked already
// (bucketLockSQL): a missing row would leave the LIMIT at $1.
func (t Table) limited(ids string, first int) string {
	return fmt.Sprintf(`WITH bucket AS (
	SELECT c.at, least($%[3]d::float8, b.tokens + greatest(EXTRACT(EPOCH FROM c.at - b.at), 0) * $%[2]d::float8) AS tokens
	FROM postbox_rate_buckets b, (SELECT clock_timestamp() AS at) c
	WHERE b.name = $%[4]d
), %[1]s, spent AS (
	UPDATE postbox_rate_buckets b SET tokens = greatest(bucket.tokens - (SELECT count(*) FROM claimed), 0), at = bucket.at
	FROM bucket WHERE b.name = $%[4]d AND EXISTS (SELECT 1 FROM claimed)
)
%[5]s`, t.rankedClaim(ids), first, first+1, first+2, t.rankedRows())
}

// held reads what a limited claim of n that took rows left: its limit was
// n or the whole tokens it found, which are the tokens it left plus one
// per row it took.
func held(tokens float64, n, rows int) Held {
	found := math.Floor(tokens + float64(rows) + 1e-9)
	return Held{Tokens: tokens, Short: found < float64(n) && float64(rows) >= found}
}
