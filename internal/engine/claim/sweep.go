package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// roundRows bounds one statement of a sweep: a round's rows stay locked
// until it commits.
const roundRows = 1000

// SweepSQL moves up to $3 pending rows due in [$1, $2) — behind a window
// whose edge is $2 — to now(), in front of every window's edge, so that
// the next claims take them; it returns their ids and the newest due time
// it moved, where the next round starts, and the due time it gave them
// (the statement's now()). It changes only the due column:
// attempts and every mark stay the claim's. A row locked elsewhere (being
// claimed or marked) is skipped, not waited for. Every pending row behind
// an edge is due (a lease or a back-off is a due time in front of it).
func (t Table) SweepSQL() string {
	return fmt.Sprintf(`WITH picked AS MATERIALIZED (
	SELECT id, %[2]s AS due FROM %[1]s
	WHERE status = 'pending' AND %[2]s >= $1::timestamptz AND %[2]s < $2::timestamptz%[3]s
	ORDER BY %[2]s
	LIMIT $3
	FOR UPDATE SKIP LOCKED)
UPDATE %[1]s SET %[2]s = now()
WHERE id = ANY (ARRAY(SELECT id FROM picked))
RETURNING id::text, (SELECT max(due) FROM picked), now()`, t.Name, t.DueColumn, t.claimable())
}

// legacySweepSQL moves up to $1 pending rows whose due column is NULL into
// the window (LEGACY BRANCH, see Table.LegacyNullDue). Its partial index
// (webhook_deliveries_legacy_due_idx) holds only such rows: none, once the
// last delivery written before deliveries were born leased is resolved.
func (t Table) legacySweepSQL() string {
	return fmt.Sprintf(`UPDATE %[1]s SET %[2]s = now()
WHERE id = ANY (ARRAY(
	SELECT id FROM %[1]s WHERE status = 'pending' AND %[2]s IS NULL%[3]s
	LIMIT $1
	FOR UPDATE SKIP LOCKED))
RETURNING id::text, now(), now()`, t.Name, t.DueColumn, t.claimable())
}

// Edges is where a lane's claims start, as a sweep sees it: a Window, or
// a Fair's edges. Low is the lowest edge, behind which no row is in front
// of any of them; Rewind moves every edge back.
type Edges interface {
	Low() time.Time
	Rewind(to time.Time)
}

// Swept is what one Sweep moved into the window.
type Swept struct {
	Rows  int
	First []string // the first few ids, for the log line
}

// Sweep moves every pending row of t due behind w's edge — a row whose
// transaction committed long after it began, or written with a due time in
// the past — and, with LegacyNullDue, every row with no due time, to
// now(), so that w's next claims (and every other lane's) take them. It is
// the window's backstop, run at an interval (engine.Lane), not on the
// claim's path: under a held snapshot it walks the dead index entries
// behind the edge that the claims skip. Each round is its own short
// statement.
func Sweep(ctx context.Context, db DB, t Table, w Edges) (Swept, error) {
	var out Swept
	// rounds runs sql until a round moves fewer than roundRows; args gives
	// a round's arguments from where the last one stopped. Each round has
	// committed when sweepRound returns: the window goes back to the due
	// time it gave its rows, so that they are in front of it however long
	// the round took (Window.Rewind).
	rounds := func(sql string, args func(from time.Time) []any) error {
		from := time.Time{}
		for {
			ids, next, moved, err := sweepRound(ctx, db, sql, args(from)...)
			if err != nil {
				return fmt.Errorf("sweep %s: %w", t.Name, err)
			}
			out.Rows += len(ids)
			if room := 10 - len(out.First); room > 0 {
				out.First = append(out.First, ids[:min(len(ids), room)]...)
			}
			if len(ids) > 0 {
				w.Rewind(moved)
			}
			if len(ids) < roundRows {
				return nil
			}
			from = next
		}
	}
	if edge := w.Low(); !edge.IsZero() {
		if err := rounds(t.SweepSQL(), func(from time.Time) []any { return []any{from, edge, roundRows} }); err != nil {
			return out, err
		}
	}
	if t.LegacyNullDue {
		if err := rounds(t.legacySweepSQL(), func(time.Time) []any { return []any{roundRows} }); err != nil {
			return out, err
		}
	}
	return out, nil
}

// sweepRound runs one round and returns once it has committed: its ids,
// the newest due time it moved, and the due time it gave them.
func sweepRound(ctx context.Context, db DB, sql string, args ...any) (ids []string, next, moved time.Time, err error) {
	// Detached like a claim: a round cancelled after its commit would move
	// its rows without rewinding the window to them.
	ctx, cancel := MarkContext(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(IndexOnlySQL)
	b.Queue(sql, args...)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, next, moved, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, next, moved, err
	}
	var id string
	if _, err = pgx.ForEachRow(rows, []any{&id, &next, &moved}, func() error {
		ids = append(ids, id)
		return nil
	}); err != nil {
		return nil, next, moved, err
	}
	// The batch's implicit transaction commits at its Sync: Close waits
	// for it, so a round is visible to every claim that starts after.
	return ids, next, moved, br.Close()
}
