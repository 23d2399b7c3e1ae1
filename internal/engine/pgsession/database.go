package pgsession

import (
	"context"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Database is which database a connection reaches: its oid and name, and
// when its server started. Two URLs that reach the same database give the
// same Database, also when one goes through a pooler; two servers, or a
// server restored elsewhere under the same name, give different ones.
type Database struct {
	OID     int64
	Name    string
	Started string // pg_postmaster_start_time, as text
}

// databaseSQL is DatabaseOf's statement.
const databaseSQL = `SELECT d.oid::bigint, d.datname::text, pg_postmaster_start_time()::text
FROM pg_database d WHERE d.datname = current_database()`

// DatabaseOf reads which database db reaches.
func DatabaseOf(ctx context.Context, db claim.DB) (Database, error) {
	var d Database
	err := db.QueryRow(ctx, databaseSQL).Scan(&d.OID, &d.Name, &d.Started)
	return d, err
}
