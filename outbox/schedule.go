package outbox

import (
	"fmt"
	"time"
)

// MaxSendAhead is how far ahead Email.SendAt may be: a year. A due time
// further off is far more likely a unit mistake (milliseconds read as
// seconds, a year typed wrong) than a reminder anyone wants, and a row
// held that long outlives the links and tokens it carries.
const MaxSendAhead = 365 * 24 * time.Hour

// sendAtArg is Email.SendAt as enqueueSQL's due-time parameter: nil (the
// database's now) for zero, and the time itself otherwise — one already
// past is now too, which the statement decides on the database's clock.
func sendAtArg(at, now time.Time) (any, error) {
	if at.IsZero() {
		return nil, nil
	}
	if at.After(now.Add(MaxSendAhead)) {
		return nil, invalid("send_at", fmt.Sprintf("is %s, more than %s ahead (MaxSendAhead)",
			at.UTC().Format(time.RFC3339), "a year"))
	}
	return at, nil
}
