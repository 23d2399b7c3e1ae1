package leases

import (
	"math/rand/v2"
	"time"
)

// Backoff is a retry schedule: slot i is the wait after the (i+1)-th failed
// attempt. When the slots run out the row fails for good.
type Backoff []time.Duration

// EmailBackoff has 15 slots totalling about 72 hours (see
// docs/design/outbox-transport.md, Redelivery semantics).
var EmailBackoff = Backoff{
	1 * time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute,
	1 * time.Hour, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 6 * time.Hour, 8 * time.Hour,
	12 * time.Hour, 15 * time.Hour, 20 * time.Hour,
}

// Total is the schedule's length without jitter.
func (b Backoff) Total() time.Duration {
	var sum time.Duration
	for _, d := range b {
		sum += d
	}
	return sum
}

// Next returns the wait after attempt number attempts (1-based, as counted
// by the claim) failed transiently, with ±10% jitter so rows that failed
// together do not retry together. ok is false when the slots are spent.
func (b Backoff) Next(attempts int) (wait time.Duration, ok bool) {
	if attempts < 1 || attempts > len(b) {
		return 0, false
	}
	base := b[attempts-1]
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(base))
	return base + jitter, true
}

// Scaled returns b with every slot multiplied by f: the soak test and
// staging compress hours into seconds with it. Slots never drop below a
// millisecond.
func (b Backoff) Scaled(f float64) Backoff {
	out := make(Backoff, len(b))
	for i, d := range b {
		out[i] = max(time.Duration(float64(d)*f), time.Millisecond)
	}
	return out
}
