// Package pgbouncertest puts a real PgBouncer in transaction pooling mode
// in front of a test database (internal/tooling/pgbouncer), so tests run
// `worker run` through a pooler that hands each transaction whichever
// server connection is free — where a prepared statement, a LISTEN or a
// session setting breaks. Its configuration goes in t.TempDir(); it runs
// until the test ends.
//
// The binary is PGBOUNCER_BIN, else pgbouncer on PATH, else
// /usr/sbin/pgbouncer. Without it the tests skip locally with install
// instructions, and fail when CI is set, as the Mailpit tests do.
package pgbouncertest
