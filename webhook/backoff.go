package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/leases"
)

// DefaultBackoff is the wait after each failed attempt of a delivery,
// modelled on Svix: the first attempt runs at once (in process, right after
// the fan-out commits), then retries follow after 5 s, 5 min, 30 min, 2 h,
// 5 h, 10 h and 10 h. Each wait gets ±10% jitter (leases.Backoff.Next) so
// deliveries that failed together — an endpoint that was down — do not
// retry together. Eight attempts over about 27.6 hours; a delivery still
// failing after the eighth is failed for good, and can be replayed.
var DefaultBackoff = leases.Backoff{
	5 * time.Second,
	5 * time.Minute,
	30 * time.Minute,
	2 * time.Hour,
	5 * time.Hour,
	10 * time.Hour,
	10 * time.Hour,
}

// Bounds on an honoured Retry-After. Below a second is a busy loop; above an
// hour a receiver could park a delivery for days with one header, so an
// hour is the most we wait before asking again.
const (
	MinRetryAfter = time.Second
	MaxRetryAfter = time.Hour
)

// outboxBackoff is the wait after a failed fan-out of a webhook_outbox row.
// A fan-out is a database transaction, so a failure is the database's: retry
// soon, then back off; after ten failures the row is failed and waits for an
// operator (see docs/design/outbox-transport.md, Redelivery semantics):
//
//	UPDATE webhook_outbox SET status = 'pending', attempts = 0, next_attempt_at = now()
//	WHERE id = '…' AND status = 'failed';
var outboxBackoff = leases.Backoff{
	5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
}

// retryAfter reads a 429 or 503 answer's Retry-After (delay-seconds or an
// HTTP-date) and clamps it to [MinRetryAfter, MaxRetryAfter]. ok is false
// when the status does not carry the header's meaning or it does not parse.
func retryAfter(status int, h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return 0, false
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		wait = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		wait = at.Sub(now)
	} else {
		return 0, false
	}
	return min(max(wait, MinRetryAfter), MaxRetryAfter), true
}
