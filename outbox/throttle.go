package outbox

import (
	"math/rand/v2"
	"time"
)

// ThrottleRetry is the mean wait after a relay's throttling reply
// (smtp.ErrThrottled: 421, 451 4.7.x, SES's 454 Throttling). The relay is
// asking for a slower pace, not refusing the message: the row is retried
// in seconds rather than on the backoff schedule, whose first slot is a
// minute, and the attempt is logged (outcome retry, with the reply) but
// not counted toward the retry budget, so a busy afternoon at the relay
// cannot fail mail that was never refused. Rows retried together are
// spread over half to one and a half times this, so they do not come back
// to the relay all at once.
const ThrottleRetry = 5 * time.Second

// throttleWait is a throttled row's mean wait: ThrottleRetry, a field of
// the Dispatcher so tests can shrink it.
type throttleWait time.Duration

// jittered is w spread uniformly over [w/2, 3w/2).
func (w throttleWait) jittered() time.Duration {
	return time.Duration(float64(w) * (0.5 + rand.Float64()))
}
