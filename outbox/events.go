package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/pgtext"
)

// EventType is what a delivery event says happened to a sent email. It is
// the email_events.type column, whose CHECK lists the same values.
type EventType string

const (
	EventDelivered  EventType = "delivered"  // the receiving server accepted it
	EventBounced    EventType = "bounced"    // it came back (BounceClass says how badly)
	EventComplained EventType = "complained" // the recipient marked it as spam
	EventDeferred   EventType = "deferred"   // delivery is delayed; the provider keeps trying
)

func (t EventType) known() bool {
	switch t {
	case EventDelivered, EventBounced, EventComplained, EventDeferred:
		return true
	}
	return false
}

// BounceClass is a bounce's severity: hard (the mailbox does not exist or
// refuses mail for good — suppress now) or soft (full mailbox, a transient
// refusal — suppress after SuppressionPolicy.SoftBounceLimit of them).
type BounceClass string

const (
	BounceHard BounceClass = "hard"
	BounceSoft BounceClass = "soft"
)

// ProviderSMTP is the provider name of events the dispatcher records from
// the relay's own permanent replies (5.1.1 and similar).
const ProviderSMTP = "smtp"

// Limits of what an event stores (the email_events CHECKs hold the same).
const (
	MaxEventExcerptBytes = 4096 // raw_excerpt: the start of the provider's payload
	maxEventTextBytes    = 1024 // detail, ref, provider ids, recipient
)

// Event is one email_events row: what a provider reported about a sent
// email. It never changes the row's status: dispatched is the transport's
// record, events are what happened afterwards.
type Event struct {
	ID    int64
	RowID string // the email_outbox row; "" for an orphan
	// Ref is the correlation key the event carried — the row id it named
	// or the provider's message id — kept so an orphan can be traced.
	Ref               string
	Type              EventType
	BounceClass       BounceClass // set for EventBounced only
	Provider          string      // "postmark", "ses", "generic", "smtp"…
	ProviderEventID   string      // unique per provider: a replay is recorded once
	ProviderMessageID string      // the provider's id for the message, the correlation fallback
	Recipient         string      // bare, lower-cased
	Detail            string      // the provider's description, e.g. "550 5.1.1 user unknown"
	RawExcerpt        string      // the payload's start, at most MaxEventExcerptBytes
	OccurredAt        *time.Time  // when the provider says it happened
	ReceivedAt        time.Time
}

// Orphan reports whether the event's row was not found.
func (e Event) Orphan() bool { return e.RowID == "" }

// SuppressionPolicy is when events put an address on the list: every hard
// bounce and complaint at once; soft bounces once SoftBounceLimit of them
// arrived for the address within SoftBounceWindow. Only for the recipient
// of the row the event names: an event about another address is stored as
// a mismatch and suppresses nothing, and an orphan (no row found)
// suppresses only with SuppressOrphans, at most MaxOrphanSuppressionsPerHour
// an hour.
type SuppressionPolicy struct {
	SoftBounceLimit  int           // 0 means DefaultSoftBounceLimit
	SoftBounceWindow time.Duration // 0 means DefaultSoftBounceWindow
	// SuppressOrphans lets an event that names no row of ours suppress its
	// recipient. Off by default: nothing ties such an address to mail
	// postbox sent, so whoever holds the endpoint's credentials — or a
	// provider account shared with another sender — could otherwise put
	// any address on the list. Turn it on when postbox's rows are the
	// only mail the provider account sends and its events carry no row id.
	SuppressOrphans bool
}

// MaxOrphanSuppressionsPerHour bounds, pool-wide, the suppressions orphan
// events add within an hour when SuppressOrphans is on: a burst of
// unknown-row bounces (a replayed dump, a misrouted account) past it is
// stored and counted, and suppresses no more.
const MaxOrphanSuppressionsPerHour = 100

// DefaultOrphanEventRetention is how long an orphan event (one whose row
// was never found, row_id NULL) is kept before the pruner deletes it
// (PruneOrphanEvents; EVENTS_ORPHAN_RETENTION). An orphan is kept so an
// operator can trace it — its ref and payload excerpt — after the orphan
// alert fires: 30 days covers a monthly review and the time to fix the
// provider's setup and look back at what arrived before. It is far past
// every provider's redelivery window (hours), so deleting it cannot let a
// provider's redelivery be recorded twice, and past the soft-bounce window, within which
// an orphan soft bounce still counts toward its recipient's limit.
const DefaultOrphanEventRetention = 30 * 24 * time.Hour

// orphanPruneChunk bounds one DELETE of PruneOrphanEvents, so a large
// backlog is removed in short statements that never hold many row locks
// or one long transaction (webhook.PruneOutbox's pattern).
const orphanPruneChunk = 5000

// The soft-bounce defaults: three within a week is a mailbox that keeps
// refusing, not a bad afternoon.
const (
	DefaultSoftBounceLimit  = 3
	DefaultSoftBounceWindow = 7 * 24 * time.Hour
)

// Recorded is what RecordEvent did with one event.
type Recorded struct {
	Event      Event        // as stored (RowID resolved, ID and ReceivedAt set); the existing one for a duplicate
	Duplicate  bool         // the provider event id was already recorded: nothing was written
	Suppressed *Suppression // the entry this event added, if any
	// Mismatch: the event names a row but another recipient than the
	// row's. It is stored, and suppresses nothing.
	Mismatch bool
	// OrphanHeld: an orphan that would have suppressed its recipient, held
	// back by the policy (SuppressOrphans off, or the hourly bound reached).
	OrphanHeld bool
}

var providerRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// recordEventSQL correlates and inserts in one statement. The row is the
// one named ($1, when it exists), else the row of an earlier event from
// the same provider about the same provider message id (the fallback for
// an event that carries only the provider's id), else none: an orphan.
// A duplicate provider event id inserts nothing: the table is partitioned
// by week (migration 00018), and its unique index on the provider's event
// id holds within a week, where ON CONFLICT drops a duplicate, racing or
// not; NOT EXISTS drops one recorded in the 30 days before (a provider
// retries for hours, not weeks), looking only at those weeks.
const recordEventSQL = `INSERT INTO email_events (row_id, ref, type, bounce_class, provider, provider_event_id,
	provider_message_id, recipient, detail, raw_excerpt, occurred_at)
SELECT coalesce(
		(SELECT id FROM email_outbox WHERE id = $1::uuid),
		(SELECT row_id FROM email_events WHERE provider = $5 AND provider_message_id = $7 AND $7 <> ''
			AND row_id IS NOT NULL ORDER BY id LIMIT 1)),
	$2, $3, $4, $5, $6, $7, $8, $9, $10, $11
WHERE NOT EXISTS (SELECT 1 FROM email_events WHERE provider = $5 AND provider_event_id = $6
	AND received_at >= now() - interval '30 days')
ON CONFLICT DO NOTHING
RETURNING ` + eventColumns + `, coalesce((SELECT payload->>'to' FROM email_outbox WHERE id = row_id), '')`

const eventColumns = `id, coalesce(row_id::text, ''), ref, type, coalesce(bounce_class, ''), provider, provider_event_id,
	provider_message_id, recipient, detail, raw_excerpt, occurred_at, received_at`

// RecordEvent stores e (once per provider event id), correlating it to its
// row, and applies the suppression lifecycle: a hard bounce or complaint
// adds the recipient with the event's detail and row; a soft bounce adds it
// once policy's limit is reached within its window. e.RowID is the row the
// event names, "" if none; a value that is no row id (or no existing row)
// is kept in Ref and the event is correlated by ProviderMessageID or
// stored as an orphan. Invalid events are *ValidationError (ErrInvalid).
func RecordEvent(ctx context.Context, db DB, e Event, policy SuppressionPolicy) (Recorded, error) {
	if err := e.normalize(); err != nil {
		return Recorded{}, err
	}
	var named *string
	if IsRowID(e.RowID) {
		named = &e.RowID
	}
	var bounceClass *string
	if e.BounceClass != "" {
		bounceClass = new(string(e.BounceClass))
	}
	var rowTo string
	stored, err := scanEvent(db.QueryRow(ctx, recordEventSQL, named, e.Ref, string(e.Type), bounceClass, e.Provider,
		e.ProviderEventID, e.ProviderMessageID, e.Recipient, e.Detail, e.RawExcerpt, e.OccurredAt), &rowTo)
	if errors.Is(err, pgx.ErrNoRows) {
		existing, err := scanEvent(db.QueryRow(ctx, `SELECT `+eventColumns+` FROM email_events
WHERE provider = $1 AND provider_event_id = $2`, e.Provider, e.ProviderEventID))
		if err != nil {
			return Recorded{}, fmt.Errorf("outbox: record event: read the duplicate: %w", err)
		}
		return Recorded{Event: existing, Duplicate: true}, nil
	}
	if err != nil {
		return Recorded{}, fmt.Errorf("outbox: record event: %w", err)
	}
	rec := Recorded{Event: stored}
	if !stored.Orphan() && stored.Recipient != "" {
		// A row whose "to" no longer parses matches nothing: only the
		// address the row was sent to may be suppressed through it.
		if to, err := recipient(rowTo); err != nil || to != stored.Recipient {
			rec.Mismatch = true
			return rec, nil
		}
	}
	if rec.Suppressed, rec.OrphanHeld, err = applySuppression(ctx, db, stored, policy); err != nil {
		return rec, err
	}
	return rec, nil
}

// Validate reports what RecordEvent would refuse in e, without the
// database: callers that record several events check them all first, so
// a bad one writes none.
func (e Event) Validate() error { return e.normalize() }

// normalize checks e and brings it to what the columns hold.
func (e *Event) normalize() error {
	if !e.Type.known() {
		return invalid("event.type", "is not one of delivered, bounced, complained, deferred")
	}
	switch {
	case e.Type == EventBounced && e.BounceClass != BounceHard && e.BounceClass != BounceSoft:
		return invalid("event.bounce_class", "must be hard or soft for a bounce")
	case e.Type != EventBounced && e.BounceClass != "":
		return invalid("event.bounce_class", "is only for bounces")
	}
	if !providerRE.MatchString(e.Provider) {
		return invalid("event.provider", "must be 1-32 lower-case letters, digits, - or _")
	}
	clean := func(s string, n int) string { s, _ = pgtext.Clean(s, n); return s }
	e.ProviderEventID = clean(e.ProviderEventID, maxEventTextBytes)
	if e.ProviderEventID == "" {
		return invalid("event.provider_event_id", "is required: it is what makes a replay harmless")
	}
	if e.Recipient != "" {
		addr, err := recipient(e.Recipient)
		if err != nil {
			return invalid("event.recipient", "is not a single valid address: "+err.Error())
		}
		e.Recipient = addr
	}
	e.Ref = cmp.Or(e.Ref, e.RowID, e.ProviderMessageID)
	e.Ref = clean(e.Ref, maxEventTextBytes)
	e.ProviderMessageID = clean(e.ProviderMessageID, maxEventTextBytes)
	e.Recipient = clean(e.Recipient, maxEventTextBytes)
	e.Detail = clean(e.Detail, maxEventTextBytes)
	e.RawExcerpt = clean(e.RawExcerpt, MaxEventExcerptBytes)
	return nil
}

// countSoftBouncesSQL counts the recipient's soft bounces in the window,
// the one just recorded included.
const countSoftBouncesSQL = `SELECT count(*) FROM email_events
WHERE recipient = $1 AND type = 'bounced' AND bounce_class = 'soft' AND received_at > now() - $2::interval`

// countOrphanSuppressionsSQL counts the suppressions events without a row
// added in the last hour, pool-wide.
const countOrphanSuppressionsSQL = `SELECT count(*) FROM email_suppressions
WHERE source IN ('hard_bounce', 'complaint', 'soft_bounces') AND source_row IS NULL AND created_at > now() - interval '1 hour'`

// applySuppression is the lifecycle step of one newly recorded event. held
// is true for an orphan the policy kept from suppressing.
func applySuppression(ctx context.Context, db DB, e Event, policy SuppressionPolicy) (_ *Suppression, held bool, _ error) {
	if e.Recipient == "" {
		return nil, false, nil
	}
	s := Suppression{Email: e.Recipient, SourceRow: e.RowID}
	detail := e.Detail
	if detail == "" {
		detail = "no detail given"
	}
	switch {
	case e.Type == EventBounced && e.BounceClass == BounceHard && e.Provider == ProviderSMTP:
		s.Source, s.Reason = SourceSMTPReply, "the relay refused the mailbox: "+detail
	case e.Type == EventBounced && e.BounceClass == BounceHard:
		s.Source, s.Reason = SourceHardBounce, "hard bounce reported by "+e.Provider+": "+detail
	case e.Type == EventComplained:
		s.Source, s.Reason = SourceComplaint, "spam complaint reported by "+e.Provider
	case e.Type == EventBounced && e.BounceClass == BounceSoft:
		limit, window := policy.SoftBounceLimit, policy.SoftBounceWindow
		if limit <= 0 {
			limit = DefaultSoftBounceLimit
		}
		if window <= 0 {
			window = DefaultSoftBounceWindow
		}
		var n int
		if err := db.QueryRow(ctx, countSoftBouncesSQL, e.Recipient, window).Scan(&n); err != nil {
			return nil, false, fmt.Errorf("outbox: count soft bounces: %w", err)
		}
		if n < limit {
			return nil, false, nil
		}
		s.Source = SourceSoftBounces
		s.Reason = strconv.Itoa(n) + " soft bounces within " + window.String() + ", the last reported by " + e.Provider + ": " + detail
	default:
		return nil, false, nil
	}
	if !IsRowID(s.SourceRow) {
		s.SourceRow = ""
	}
	if s.SourceRow == "" {
		if !policy.SuppressOrphans {
			return nil, true, nil
		}
		var n int
		if err := db.QueryRow(ctx, countOrphanSuppressionsSQL).Scan(&n); err != nil {
			return nil, false, fmt.Errorf("outbox: count orphan suppressions: %w", err)
		}
		if n >= MaxOrphanSuppressionsPerHour {
			return nil, true, nil
		}
	}
	added, err := AddSuppression(ctx, db, s)
	if err != nil || !added {
		return nil, false, err
	}
	return &s, false, nil
}

// pruneOrphanEventsSQL deletes one chunk of the orphans older than $1,
// oldest first, through email_events_orphan_idx. Only orphans: a
// correlated event is its row's delivery timeline and stays.
const pruneOrphanEventsSQL = `DELETE FROM email_events WHERE id IN (
	SELECT id FROM email_events
	WHERE row_id IS NULL AND received_at < now() - $1::interval
	ORDER BY received_at
	LIMIT $2)`

// PruneOrphanEvents deletes the orphan events (row_id NULL) received more
// than olderThan ago, in chunks, and returns how many it deleted. Events
// whose row was found are never deleted here, whatever their age. The
// leader-gated prune pass (jobs.Passes.Prune) calls it with
// EVENTS_ORPHAN_RETENTION. db is a pool: each chunk is its own statement.
func PruneOrphanEvents(ctx context.Context, db claim.DB, olderThan time.Duration) (int64, error) {
	return pruneOrphanEvents(ctx, db, olderThan, orphanPruneChunk)
}

func pruneOrphanEvents(ctx context.Context, db claim.DB, olderThan time.Duration, chunk int) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("outbox: prune orphan events: retention must be positive, got %s", olderThan)
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, pruneOrphanEventsSQL, olderThan, chunk)
		if err != nil {
			return total, fmt.Errorf("outbox: prune orphan events: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(chunk) {
			return total, nil
		}
	}
}

// EventsFor returns the row's events, oldest first: its delivery timeline.
func EventsFor(ctx context.Context, db DB, rowID string) ([]Event, error) {
	byRow, err := EventsForRows(ctx, db, []string{rowID})
	return byRow[rowID], err
}

// EventsForRows is EventsFor for many rows in one query: each row's
// events, oldest first, keyed by row id.
func EventsForRows(ctx context.Context, db DB, rowIDs []string) (map[string][]Event, error) {
	for _, id := range rowIDs {
		if !IsRowID(id) {
			return nil, invalid("row_id", "is not a row id")
		}
	}
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM email_events
WHERE row_id = ANY ($1::uuid[]) ORDER BY received_at, id`, rowIDs)
	if err != nil {
		return nil, fmt.Errorf("outbox: events for rows: %w", err)
	}
	events, err := collectEvents(rows, "events for rows")
	if err != nil {
		return nil, err
	}
	byRow := make(map[string][]Event, len(rowIDs))
	for _, e := range events {
		byRow[e.RowID] = append(byRow[e.RowID], e)
	}
	return byRow, nil
}

// EventFilter narrows ListEvents.
type EventFilter struct {
	Type        EventType // "" means every type
	OrphansOnly bool      // only events whose row was not found
	Limit       int       // 0 means DefaultListLimit; capped at MaxListLimit
}

// ListEvents returns the newest events first.
func ListEvents(ctx context.Context, db DB, f EventFilter) ([]Event, error) {
	limit := listLimit(f.Limit)
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM email_events
WHERE ($1 = '' OR type = $1) AND (NOT $2 OR row_id IS NULL)
ORDER BY received_at DESC, id DESC
LIMIT $3`, string(f.Type), f.OrphansOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list events: %w", err)
	}
	return collectEvents(rows, "list events")
}

func collectEvents(rows pgx.Rows, what string) ([]Event, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", what, err)
	}
	return out, nil
}

// scanEvent reads eventColumns, then into extra whatever the statement
// returns after them.
func scanEvent(row pgx.Row, extra ...any) (Event, error) {
	var e Event
	var typ, class string
	err := row.Scan(append([]any{&e.ID, &e.RowID, &e.Ref, &typ, &class, &e.Provider, &e.ProviderEventID,
		&e.ProviderMessageID, &e.Recipient, &e.Detail, &e.RawExcerpt, &e.OccurredAt, &e.ReceivedAt}, extra...)...)
	e.Type, e.BounceClass = EventType(typ), BounceClass(class)
	return e, err
}
