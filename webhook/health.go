package webhook

import (
	"context"
	"fmt"
	"time"
)

// Health is how an endpoint has been answering: the operator's "why is
// endpoint E failing?". It is read from the attempt log, so it covers
// every attempt — first attempts, retries and replays — and nothing else.
type Health struct {
	Endpoint Endpoint       `json:"endpoint"` // without its secret
	Windows  []HealthWindow `json:"windows"`  // the last hour, the last day

	// ConsecutiveFailures counts the newest attempts that were not a 2xx,
	// back to the last success, at most MaxConsecutiveCounted.
	ConsecutiveFailures int        `json:"consecutive_failures"`
	LastError           string     `json:"last_error,omitempty"` // the newest failed attempt's error, or its status
	LastErrorAt         *time.Time `json:"last_error_at,omitempty"`
	LastSuccessAt       *time.Time `json:"last_success_at,omitempty"`
}

// HealthWindow is one window's figures.
type HealthWindow struct {
	Name      string        `json:"name"` // "last hour", "last day"
	Window    time.Duration `json:"window_ns"`
	Attempts  int           `json:"attempts"`
	Succeeded int           `json:"succeeded"` // a 2xx answer
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
}

// SuccessRate is the share of attempts answered with a 2xx, 0 to 1; with
// no attempts it is 0 (the page says "no attempts").
func (w HealthWindow) SuccessRate() float64 {
	if w.Attempts == 0 {
		return 0
	}
	return float64(w.Succeeded) / float64(w.Attempts)
}

// MaxConsecutiveCounted caps ConsecutiveFailures: past it the endpoint is
// plainly down, and counting further would read its whole history.
const MaxConsecutiveCounted = 1000

// HealthWindows are the windows EndpointHealth reports.
var HealthWindows = []struct {
	Name   string
	Window time.Duration
}{{"last hour", time.Hour}, {"last day", 24 * time.Hour}}

// healthWindowSQL reads one window of an endpoint's attempts ($1, $2).
const healthWindowSQL = `SELECT count(*), count(*) FILTER (WHERE a.status_code BETWEEN 200 AND 299),
	coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY a.duration_ms), 0)::float8,
	coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY a.duration_ms), 0)::float8
FROM webhook_delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
WHERE d.endpoint_id = $1 AND a.created_at > now() - $2::interval`

// recentAttemptsSQL is the endpoint's newest attempts, newest first ($1, limit $2).
const recentAttemptsSQL = `SELECT a.created_at, coalesce(a.status_code, 0), coalesce(a.error, '')
FROM webhook_delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
WHERE d.endpoint_id = $1 ORDER BY a.created_at DESC, a.id DESC LIMIT $2`

// EndpointHealth reads the endpoint's health, or an error matching
// ErrNotFound.
func EndpointHealth(ctx context.Context, db DB, id string) (Health, error) {
	ep, err := GetEndpoint(ctx, db, id)
	if err != nil {
		return Health{}, err
	}
	h := Health{Endpoint: ep}
	for _, w := range HealthWindows {
		hw := HealthWindow{Name: w.Name, Window: w.Window}
		var p50, p99 float64
		if err := db.QueryRow(ctx, healthWindowSQL, id, w.Window).Scan(&hw.Attempts, &hw.Succeeded, &p50, &p99); err != nil {
			return h, fmt.Errorf("webhook: health of %s: %w", id, err)
		}
		hw.P50 = time.Duration(p50 * float64(time.Millisecond))
		hw.P99 = time.Duration(p99 * float64(time.Millisecond))
		h.Windows = append(h.Windows, hw)
	}
	rows, err := db.Query(ctx, recentAttemptsSQL, id, MaxConsecutiveCounted)
	if err != nil {
		return h, fmt.Errorf("webhook: health of %s: %w", id, err)
	}
	defer rows.Close()
	counting := true
	for rows.Next() {
		var at time.Time
		var code int
		var msg string
		if err := rows.Scan(&at, &code, &msg); err != nil {
			return h, fmt.Errorf("webhook: health of %s: %w", id, err)
		}
		if code >= 200 && code <= 299 {
			if h.LastSuccessAt == nil {
				h.LastSuccessAt = &at
			}
			counting = false
		} else {
			if counting {
				h.ConsecutiveFailures++
			}
			if h.LastErrorAt == nil {
				h.LastErrorAt = &at
				h.LastError = attemptErrorText(code, msg)
			}
		}
		if !counting && h.LastErrorAt != nil {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return h, fmt.Errorf("webhook: health of %s: %w", id, err)
	}
	return h, nil
}

// attemptErrorText is what an attempt that was not a 2xx says went wrong.
func attemptErrorText(code int, msg string) string {
	switch {
	case msg != "":
		return msg
	case code != 0:
		return fmt.Sprintf("HTTP %d", code)
	}
	return "no response"
}
