package pgsession

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Backend is the server backend a statement ran on: its pid, and its
// start, so a pid reused after a backend exits is not the same backend.
type Backend struct {
	PID     int32
	Started string // backend_start, as text
}

// backendSQL is BackendOf's statement.
const backendSQL = `SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()`

// BackendOf reads the backend its statement runs on, through db. The
// statement is sent unprepared: behind a transaction pooler, a statement
// prepared on one backend is missing on the next, and the question is
// precisely whether the backend changed.
func BackendOf(ctx context.Context, db claim.DB) (Backend, error) {
	var b Backend
	err := db.QueryRow(ctx, backendSQL, pgx.QueryExecModeSimpleProtocol).Scan(&b.PID, &b.Started)
	return b, err
}
