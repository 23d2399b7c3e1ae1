package outbox

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
)

// RateLimitEnv is the variable of the pool-wide email send rate.
const RateLimitEnv = "EMAIL_RATE_LIMIT"

// MaxRateLimit bounds EMAIL_RATE_LIMIT: far above any provider's account
// limit, low enough that a typo (an extra digit or two) is refused rather
// than taken for "unlimited".
const MaxRateLimit = 10000

// RateBurst is how much sending the email bucket saves up while the pool
// sends less than its rate: a twentieth of a second's worth, at least one
// message. So over any T seconds the pool claims at most rate×T +
// max(1, rate/20) rows — 52.5 in a second at 50/s — and a provider that
// counts per second sees its limit, not twice it after a quiet spell (a
// second's worth of burst would let a quiet pool send 100 in its first
// second at 50/s). Smaller would lose tokens whenever no lane claims
// within the time the bucket takes to fill; the lanes come back after
// half of it (again).
const RateBurst = 50 * time.Millisecond

// minAgain is the shortest wait before a lane held back by the bucket
// claims again: at high rates the wait for half a burst is a few
// milliseconds, and claiming faster than this only takes turns on the
// bucket's lock.
const minAgain = 5 * time.Millisecond

// RateLimitFromEnv reads EMAIL_RATE_LIMIT through lookup: messages a
// second across every replica, 0 (or unset) for none.
func RateLimitFromEnv(lookup func(string) (string, bool)) (float64, error) {
	s, ok := lookup(RateLimitEnv)
	if !ok || strings.TrimSpace(s) == "" {
		return 0, nil
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(r) || r < 0 || r > MaxRateLimit {
		return 0, fmt.Errorf("%s=%q: must be a number of messages per second from 0 (no limit) to %d", RateLimitEnv, s, MaxRateLimit)
	}
	return r, nil
}

// emailBucket is the pool-wide bucket of a rate (nil for 0: no limit).
func emailBucket(rate float64) *claim.Bucket {
	if rate <= 0 {
		return nil
	}
	return &claim.Bucket{Name: "email", Rate: rate, Burst: burst(rate)}
}

// burst is RateBurst's worth of rate, at least one token.
func burst(rate float64) float64 {
	return math.Max(1, rate*RateBurst.Seconds())
}

// again is when a lane whose claim the bucket held short should claim
// again: once half a burst (at least one token) has come back, so a
// claim takes several rows and the bucket is seldom full — tokens a full
// bucket cannot hold are lost — while the other lanes of the pool take
// turns with it. Zero when the bucket held nothing back.
func again(b *claim.Bucket, h claim.Held) time.Duration {
	if b == nil || !h.Short {
		return 0
	}
	return max(b.Wait(h, math.Max(1, b.Burst/2)), minAgain)
}

// RateDescription is how the boot log states a rate.
func RateDescription(rate float64) string {
	if rate <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g msg/s across the pool, bursts of at most %g", rate, burst(rate))
}
