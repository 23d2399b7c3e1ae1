package webhook

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseSince reads the since of ReplayFailedSince as operators write it —
// `worker replay endpoint --since` and the console's form: an RFC3339
// time, a Go duration (24h) or a number of days (7d), the last two counted
// back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, sinceError("--since is required, e.g. --since 24h or --since 2026-09-01T00:00:00Z")
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, sinceError(fmt.Sprintf("--since %q: want an RFC3339 time (2026-09-01T00:00:00Z) or an age (24h, 7d)", s))
}

// sinceError is ParseSince's refusal: its message alone, for a flag error.
type sinceError string

func (e sinceError) Error() string        { return string(e) }
func (e sinceError) Is(target error) bool { return target == ErrBadSince }
