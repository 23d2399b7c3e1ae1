package history

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by RetentionFromEnv.
const (
	EnvEmailRetention   = "EMAIL_HISTORY_RETENTION"   // e.g. 365d; unset or "forever" keeps email attempts and events
	EnvWebhookRetention = "WEBHOOK_HISTORY_RETENTION" // e.g. 90d (the default) or "forever"
)

// DefaultWebhookRetention keeps 90 days of webhook delivery attempts, as
// Svix does. Email attempts and events are kept for ever unless set: they
// are the history of an email_outbox row, which is kept for ever.
const DefaultWebhookRetention = 90 * 24 * time.Hour

// minRetention is the shortest retention taken: a week, the partition
// size. Shorter would drop the week that is being written.
const minRetention = 7 * 24 * time.Hour

// RetentionFromEnv reads EMAIL_HISTORY_RETENTION and
// WEBHOOK_HISTORY_RETENTION through lookup.
func RetentionFromEnv(lookup func(string) (string, bool)) (Retention, error) {
	r := Retention{Webhook: DefaultWebhookRetention}
	for _, v := range []struct {
		name string
		into *time.Duration
	}{{EnvEmailRetention, &r.Email}, {EnvWebhookRetention, &r.Webhook}} {
		s, ok := lookup(v.name)
		if !ok || s == "" {
			continue
		}
		if s == "forever" {
			*v.into = 0
			continue
		}
		d, err := ParseRetention(s)
		if err == nil && d < minRetention {
			err = fmt.Errorf("must be at least 7d (history is dropped a week at a time), or forever")
		}
		if err != nil {
			return r, fmt.Errorf("%s=%q: %w", v.name, s, err)
		}
		*v.into = d
	}
	return r, nil
}

// ParseRetention accepts a Go duration (720h) or a whole number of days
// (30d), which is how an operator thinks about retention. Every retention
// setting reads its value through it.
func ParseRetention(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 100*365 {
			return 0, fmt.Errorf("must be a positive duration such as 30d or 720h")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("must be a positive duration such as 30d or 720h")
}

// RetentionVariable names the variable that sets t's retention.
func RetentionVariable(t Table) string {
	if t == WebhookDeliveryAttempts || t == WebhookEvents {
		return EnvWebhookRetention
	}
	return EnvEmailRetention
}

// FormatRetention is a retention as the variables take it: "forever", a
// number of days, or a Go duration.
func FormatRetention(d time.Duration) string {
	if d <= 0 {
		return "forever"
	}
	if d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return d.String()
}
