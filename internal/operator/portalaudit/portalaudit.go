// Package portalaudit is the tenant portal's audit log, portal_audit:
// every action a tenant takes there — who (the tenant and its portal
// session), what, on which target, when. The portal writes it
// (internal/operator/portalsite) in the transaction of the change it
// records; the operator reads it in `worker show` and the console.
package portalaudit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Entry is one action.
type Entry struct {
	At      time.Time `json:"at"`
	Tenant  string    `json:"tenant"`
	Session string    `json:"session"` // one per opened portal link
	Action  string    `json:"action"`  // e.g. endpoint.update, event.replay
	Target  string    `json:"target,omitempty"`
}

// Write records e (its At is the database's now) with db: the
// transaction of the change it records.
func Write(ctx context.Context, db claim.DB, e Entry) error {
	_, err := db.Exec(ctx, `INSERT INTO portal_audit (tenant_id, session, action, target) VALUES ($1, $2, $3, $4)`,
		e.Tenant, e.Session, e.Action, e.Target)
	if err != nil {
		return fmt.Errorf("portal audit: %w", err)
	}
	return nil
}

// InChange runs do and records its action in one transaction, so the
// change and its record commit together or not at all; do returns the
// action's target. A done action is logged with logger.
func InChange(ctx context.Context, db claim.DB, e Entry, logger *slog.Logger, do func(ctx context.Context, tx pgx.Tx) (target string, err error)) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		target, err := do(ctx, tx)
		if err != nil {
			return err
		}
		e.Target = target
		return Write(ctx, tx, e)
	})
	if err == nil {
		logger.Info("tenant action", "action", e.Action, "tenant", e.Tenant, "session", e.Session, "target", e.Target)
	}
	return err
}

// AfterDone records an action that committed on its own (a replay, which
// commits its rows and makes its first attempts): detached from ctx's
// cancellation, and a failure logged rather than returned — the action
// is done either way.
func AfterDone(ctx context.Context, db claim.DB, e Entry, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	if err := Write(ctx, db, e); err != nil {
		logger.Error("the audit record of a done tenant action could not be written", "action", e.Action, "tenant", e.Tenant,
			"session", e.Session, "target", e.Target, "error", err.Error())
	}
	logger.Info("tenant action", "action", e.Action, "tenant", e.Tenant, "session", e.Session, "target", e.Target)
}

// writeTimeout bounds AfterDone's write.
const writeTimeout = 10 * time.Second

// MaxRead bounds how many entries a read returns.
const MaxRead = 200

// OfTarget is the newest actions on target (an endpoint, an event), at
// most limit (≤ MaxRead).
func OfTarget(ctx context.Context, db claim.DB, target string, limit int) ([]Entry, error) {
	return read(ctx, db, `WHERE target = $1`, target, limit)
}

// OfTenant is the newest actions of tenant, at most limit (≤ MaxRead).
func OfTenant(ctx context.Context, db claim.DB, tenant string, limit int) ([]Entry, error) {
	return read(ctx, db, `WHERE tenant_id = $1`, tenant, limit)
}

func read(ctx context.Context, db claim.DB, where, arg string, limit int) ([]Entry, error) {
	if limit <= 0 || limit > MaxRead {
		limit = MaxRead
	}
	rows, err := db.Query(ctx, `SELECT at, tenant_id, session, action, target FROM portal_audit `+where+`
ORDER BY at DESC, id DESC LIMIT $2`, arg, limit)
	if err != nil {
		return nil, fmt.Errorf("portal audit: %w", err)
	}
	es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var e Entry
		err := row.Scan(&e.At, &e.Tenant, &e.Session, &e.Action, &e.Target)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("portal audit: %w", err)
	}
	return es, nil
}
