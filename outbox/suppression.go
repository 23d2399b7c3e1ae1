package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/pgtext"
)

// SuppressionSource says what put an address on the list. It is the
// email_suppressions.source column, whose CHECK lists the same values.
type SuppressionSource string

const (
	SourceManual      SuppressionSource = "manual"       // an operator, or the application, via Suppress
	SourceHardBounce  SuppressionSource = "hard_bounce"  // a provider reported a hard bounce
	SourceComplaint   SuppressionSource = "complaint"    // a provider reported a spam complaint
	SourceSMTPReply   SuppressionSource = "smtp_reply"   // the relay refused the mailbox permanently (5.1.1 …)
	SourceSoftBounces SuppressionSource = "soft_bounces" // SoftBounceLimit soft bounces within the window
)

// Suppression is one email_suppressions entry.
type Suppression struct {
	Email     string // bare, lower-cased
	Reason    string
	Source    SuppressionSource
	SourceRow string // the email_outbox row whose send or event caused it; "" if none
	CreatedBy string // who added it by hand; "" for automatic entries
	CreatedAt time.Time
}

// maxSuppressionReason caps a reason as stored: a relay's reply or a
// provider's description can be any length.
const maxSuppressionReason = 1024

// Suppress adds address to email_suppressions (or updates its reason), so
// no pending or future email to it is sent. Addresses are compared
// lower-cased. It is AddSuppression with SourceManual.
func Suppress(ctx context.Context, db DB, address, reason string) error {
	_, err := AddSuppression(ctx, db, Suppression{Email: address, Reason: reason, Source: SourceManual})
	return err
}

// addSuppressionSQL adds an entry and its log line in one statement. A
// manual entry replaces the reason of an existing one (the operator's word
// is the latest); an automatic one leaves an existing entry as it is, so
// the first cause stays on record and a flood of bounces writes nothing.
const addSuppressionSQL = `WITH up AS (
	INSERT INTO email_suppressions (email, reason, source, source_row, created_by)
	VALUES ($1, $2, $3, $4::uuid, $5)
	ON CONFLICT (email) DO UPDATE SET reason = EXCLUDED.reason, source = EXCLUDED.source,
		source_row = EXCLUDED.source_row, created_by = EXCLUDED.created_by
		WHERE EXCLUDED.source = 'manual'
	RETURNING email, reason, source, source_row, created_by
), logged AS (
	INSERT INTO email_suppression_log (email, action, source, reason, source_row, actor)
	SELECT email, 'added', source, reason, source_row, created_by FROM up
)
SELECT count(*) FROM up`

// AddSuppression puts s.Email on the list with its reason, source and
// source row, and logs the addition in email_suppression_log. It reports
// whether anything was written: an automatic source never overwrites an
// existing entry; SourceManual (the default) replaces its reason.
func AddSuppression(ctx context.Context, db DB, s Suppression) (added bool, err error) {
	addr, err := recipient(s.Email)
	if err != nil {
		return false, invalid("address", "is not a single valid address: "+err.Error())
	}
	if s.Source == "" {
		s.Source = SourceManual
	}
	var sourceRow *string
	if s.SourceRow != "" {
		sourceRow = &s.SourceRow
	}
	reason, _ := pgtext.Clean(s.Reason, maxSuppressionReason)
	by := pgtext.Actor(s.CreatedBy)
	var n int
	if err := db.QueryRow(ctx, addSuppressionSQL, addr, reason, string(s.Source), sourceRow, by).Scan(&n); err != nil {
		return false, fmt.Errorf("outbox: suppress: %w", err)
	}
	return n > 0, nil
}

const liftSuppressionSQL = `WITH gone AS (
	DELETE FROM email_suppressions WHERE email = $1
	RETURNING email, reason, source, source_row, created_by, created_at
), logged AS (
	INSERT INTO email_suppression_log (email, action, source, reason, source_row, actor)
	SELECT email, 'lifted', source, reason, source_row, $2 FROM gone
)
SELECT email, reason, source, coalesce(source_row::text, ''), created_by, created_at FROM gone`

// LiftSuppression removes address from the list, so the next email to it
// is sent, and logs who lifted it (the console's user, the CLI's --by) in
// email_suppression_log and at info level through logger (nil: slog.Default()).
// It returns the entry it removed, or ErrNotSuppressed.
func LiftSuppression(ctx context.Context, db DB, address, who string, logger *slog.Logger) (Suppression, error) {
	addr, err := recipient(address)
	if err != nil {
		return Suppression{}, invalid("address", "is not a single valid address: "+err.Error())
	}
	who = pgtext.Actor(who)
	s, err := scanSuppression(db.QueryRow(ctx, liftSuppressionSQL, addr, who))
	if errors.Is(err, pgx.ErrNoRows) {
		return Suppression{}, fmt.Errorf("%w: %s", ErrNotSuppressed, addr)
	}
	if err != nil {
		return Suppression{}, fmt.Errorf("outbox: lift suppression: %w", err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info("suppression lifted", "email", addr, "by", who, "source", string(s.Source), "reason", s.Reason)
	return s, nil
}

const suppressionColumns = `email, reason, source, coalesce(source_row::text, ''), created_by, created_at`

// CheckSuppression returns address's entry, and whether it has one.
func CheckSuppression(ctx context.Context, db DB, address string) (Suppression, bool, error) {
	addr, err := recipient(address)
	if err != nil {
		return Suppression{}, false, invalid("address", "is not a single valid address: "+err.Error())
	}
	s, err := scanSuppression(db.QueryRow(ctx, `SELECT `+suppressionColumns+` FROM email_suppressions WHERE email = $1`, addr))
	if errors.Is(err, pgx.ErrNoRows) {
		return Suppression{}, false, nil
	}
	if err != nil {
		return Suppression{}, false, fmt.Errorf("outbox: check suppression: %w", err)
	}
	return s, true, nil
}

// ListSuppressions returns the newest entries first, at most limit (0
// means DefaultListLimit, capped at MaxListLimit); source "" means all.
func ListSuppressions(ctx context.Context, db DB, source SuppressionSource, limit int) ([]Suppression, error) {
	limit = listLimit(limit)
	rows, err := db.Query(ctx, `SELECT `+suppressionColumns+` FROM email_suppressions
WHERE $1 = '' OR source = $1
ORDER BY created_at DESC, email
LIMIT $2`, string(source), limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list suppressions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Suppression, error) { return scanSuppression(r) })
	if err != nil {
		return nil, fmt.Errorf("outbox: list suppressions: %w", err)
	}
	return out, nil
}

func scanSuppression(row pgx.Row) (Suppression, error) {
	var s Suppression
	var source string
	err := row.Scan(&s.Email, &s.Reason, &source, &s.SourceRow, &s.CreatedBy, &s.CreatedAt)
	s.Source = SuppressionSource(source)
	return s, err
}

// suppressions holds the suppression list entries for one batch's
// recipients, read in one query after the claim instead of one per row,
// and read again before a send once it is older than the dispatcher's
// suppressionMaxAge (see suppressionView).
type suppressions struct {
	loaded  bool
	at      time.Time         // when it was read
	reasons map[string]string // bare lower-cased address → reason
}

const suppressionsSQL = `SELECT email, reason FROM email_suppressions WHERE email = ANY($1::text[])`

func loadSuppressions(ctx context.Context, db DB, addrs []string) (suppressions, error) {
	s := suppressions{reasons: map[string]string{}, at: time.Now()}
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

// suppressionView is one batch's view of the list for its recipients. The
// claim reads it once for every batch of the claim; just before each send
// the batch reads it again — one query for all its recipients — when it is
// older than maxAge, so a suppression added while the batch runs (a bounce
// arriving, an operator's add) stops the sends that follow within maxAge,
// instead of the batch's whole run (up to BatchTimeout, 300 s by default).
// A batch's rows run on one goroutine, so the view needs no lock.
type suppressionView struct {
	addrs []string // the batch's decodable recipients
	s     suppressions
}

// check is the claim-time check of addr, against the view as the claim
// read it (suppressions.check).
func (v *suppressionView) check(ctx context.Context, db DB, addr string, budget time.Duration) error {
	return v.s.check(ctx, db, addr, budget)
}

// recheck is the pre-send check of addr: the view, refreshed first when
// it is older than maxAge or was never read. A refresh that fails is a
// transient error: the row is retried rather than sent unchecked.
func (v *suppressionView) recheck(ctx context.Context, db DB, addr string, maxAge, budget time.Duration) error {
	if !v.s.loaded || time.Since(v.s.at) >= maxAge {
		rctx, stop := context.WithTimeout(ctx, budget)
		s, err := loadSuppressions(rctx, db, v.addrs)
		stop()
		if err != nil {
			return fmt.Errorf("suppression re-check before send: %w", err)
		}
		v.s = s
	}
	return v.s.check(ctx, db, addr, budget)
}

// SuppressionMaxAge bounds how stale the list may be when a claimed row is
// sent: a batch older than this re-reads its recipients' entries (one
// query) before its next send, so a suppression added mid-batch stops the
// sends after it within a second, at most one extra query per batch per
// second.
const SuppressionMaxAge = time.Second

// view is one batch's own view of s, over that batch's recipients.
func (s suppressions) view(rows []Row) *suppressionView {
	v := &suppressionView{s: s, addrs: make([]string, 0, len(rows))}
	for i := range rows {
		if rows[i].decodeErr == nil {
			v.addrs = append(v.addrs, rows[i].recipient)
		}
	}
	return v
}

// loadSuppressions reads the suppression entries of the batch's decodable
// recipients in one query. On failure each row checks for itself.
func (d *Dispatcher) loadSuppressions(ctx context.Context, rows []Row) suppressions {
	addrs := make([]string, 0, len(rows))
	for i := range rows {
		if rows[i].decodeErr == nil {
			addrs = append(addrs, rows[i].recipient)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.suppressionBudget)
	defer cancel()
	s, err := loadSuppressions(ctx, d.db, addrs)
	if err != nil {
		d.logger.Warn("batch suppression lookup failed; checking row by row", "error", err.Error())
	}
	return s
}
