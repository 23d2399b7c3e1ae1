package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrSuppressed is matched (errors.Is) by the failure of a row whose
// recipient is in email_suppressions. It is permanent: the row fails at
// once with the suppression's reason.
var ErrSuppressed = errors.New("recipient is suppressed")

// Suppress adds address to email_suppressions (or updates its reason), so
// no pending or future email to it is sent. Addresses are compared
// lower-cased.
func Suppress(ctx context.Context, db DB, address, reason string) error {
	addr, err := recipient(address)
	if err != nil {
		return invalid("address", "is not a single valid address: "+err.Error())
	}
	_, err = db.Exec(ctx, `INSERT INTO email_suppressions (email, reason) VALUES ($1, $2)
ON CONFLICT (email) DO UPDATE SET reason = EXCLUDED.reason`, addr, reason)
	if err != nil {
		return fmt.Errorf("outbox: suppress: %w", err)
	}
	return nil
}

// suppressions holds the suppression list entries for one batch's
// recipients, read in one query after the claim instead of one per row.
// A batch runs for seconds at most, so the view is fresh enough; when the
// batch query fails, each row asks for itself.
type suppressions struct {
	loaded  bool
	reasons map[string]string // bare lower-cased address → reason
}

const suppressionsSQL = `SELECT email, reason FROM email_suppressions WHERE email = ANY($1::text[])`

func loadSuppressions(ctx context.Context, db DB, addrs []string) (suppressions, error) {
	s := suppressions{reasons: map[string]string{}}
	if len(addrs) == 0 {
		s.loaded = true
		return s, nil
	}
	rows, err := db.Query(ctx, suppressionsSQL, addrs)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var email, reason string
		if err := rows.Scan(&email, &reason); err != nil {
			return s, err
		}
		s.reasons[email] = reason
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	s.loaded = true
	return s, nil
}

// check returns a permanent error when addr is suppressed, nil when it is
// not, and a transient error when it cannot tell. When the batch's lookup
// failed, the row asks for itself, within budget (leases.SuppressionBudget).
func (s suppressions) check(ctx context.Context, db DB, addr string, budget time.Duration) error {
	if !s.loaded {
		ctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		var err error
		if s, err = loadSuppressions(ctx, db, []string{addr}); err != nil {
			return fmt.Errorf("suppression check: %w", err)
		}
	}
	reason, ok := s.reasons[addr]
	if !ok {
		return nil
	}
	if reason == "" {
		reason = "no reason recorded"
	}
	return permanent(fmt.Errorf("%w: %s", ErrSuppressed, reason))
}
