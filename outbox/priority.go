package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Priority orders the claims of email_outbox (its priority column): a row
// of a lower Priority is claimed before any row of a higher one, and the
// pool-wide send rate (EMAIL_RATE_LIMIT) is spent on it first. Within a
// priority, customers take turns (see Claim). The zero Priority means the
// kind's: what email_kind_priorities holds for the kind, else
// PriorityNormal; a plain-SQL INSERT that names no priority gets the same
// from the table's trigger (migration 00033).
type Priority int16

// The named priorities; any of 1 to 9 may be used.
const (
	// PriorityHigh is the built-in kinds a person is waiting for:
	// KindPasswordReset and KindMemberInvite.
	PriorityHigh Priority = 2
	// PriorityNormal is every other kind's, unless its kind.json says.
	PriorityNormal Priority = 5
	// PriorityLow is for mail that may wait for everything else (a
	// digest, a newsletter).
	PriorityLow Priority = 8
	// MinPriority and MaxPriority bound a priority, as migration 00033's
	// CHECK email_outbox_priority_range does for plain SQL.
	MinPriority Priority = 1
	MaxPriority Priority = 9
)

// Validate reports whether p is a priority a row may hold: zero (the
// kind's) or MinPriority to MaxPriority.
func (p Priority) Validate() error {
	if p != 0 && (p < MinPriority || p > MaxPriority) {
		return invalid("priority", fmt.Sprintf("is %d, not from %d (most urgent) to %d", p, MinPriority, MaxPriority))
	}
	return nil
}

// declareKindPrioritiesSQL records each kind's priority ($1 kinds, $2
// priorities): the rows of the kind written afterwards without a priority
// take it, from Go and from plain SQL.
const declareKindPrioritiesSQL = `INSERT INTO email_kind_priorities (kind, priority)
SELECT * FROM unnest($1::text[], $2::smallint[])
ON CONFLICT (kind) DO UPDATE SET priority = EXCLUDED.priority, declared_at = now()
WHERE email_kind_priorities.priority <> EXCLUDED.priority`

// DeclareKindPriorities records the priority of each kind in
// email_kind_priorities (a template directory's kind declares its own in
// kind.json: pass templatedir.Set's KindPriorities). A Dispatcher does it
// before its first claim (Config.KindPriorities); the CLI's template
// commands do not. Each kind must be a valid kind name and each priority
// from MinPriority to MaxPriority; on a bad one nothing is written.
func DeclareKindPriorities(ctx context.Context, db DB, priorities map[Kind]Priority) error {
	if len(priorities) == 0 {
		return nil
	}
	kinds := slices.Sorted(maps.Keys(priorities))
	names := make([]string, 0, len(kinds))
	values := make([]int16, 0, len(kinds))
	for _, k := range kinds {
		p := priorities[k]
		if err := k.Validate(); err != nil {
			return fmt.Errorf("outbox: declare kind priorities: %w", err)
		}
		if p == 0 {
			return fmt.Errorf("outbox: declare kind priorities: kind %q: %w", k, invalid("priority", "is 0; give the kind's own, from 1 to 9"))
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("outbox: declare kind priorities: kind %q: %w", k, err)
		}
		names = append(names, string(k))
		values = append(values, int16(p))
	}
	if _, err := db.Exec(ctx, declareKindPrioritiesSQL, names, values); err != nil {
		return fmt.Errorf("outbox: declare kind priorities %v: %w", names, err)
	}
	return nil
}

// priorityNames are the names Priority's JSON takes beside numbers.
var priorityNames = map[string]Priority{"high": PriorityHigh, "normal": PriorityNormal, "low": PriorityLow}

// UnmarshalJSON reads a priority as a number from MinPriority to
// MaxPriority or as one of "high", "normal" and "low", and refuses
// anything else.
func (p *Priority) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		v, ok := priorityNames[name]
		if !ok {
			return invalid("priority", fmt.Sprintf("is %q, not high, normal, low or a number from %d to %d", name, MinPriority, MaxPriority))
		}
		*p = v
		return nil
	}
	var n int16
	if err := json.Unmarshal(b, &n); err != nil {
		return invalid("priority", fmt.Sprintf("is %s, not high, normal, low or a number from %d to %d", b, MinPriority, MaxPriority))
	}
	if Priority(n) < MinPriority || Priority(n) > MaxPriority {
		// Zero too: a JSON that names a priority gives one.
		return invalid("priority", fmt.Sprintf("is %d, not from %d (most urgent) to %d", n, MinPriority, MaxPriority))
	}
	*p = Priority(n)
	return nil
}
