// Package pgbouncer runs PgBouncer, the connection pooler many
// deployments put in front of Postgres, on the local machine: the tests
// (through internal/tooling/testsupport/pgbouncertest) and the bench start one in
// transaction pooling mode before a test database and run real `worker
// run` processes through it, so that whatever needs a session — a
// prepared statement, a LISTEN, a session setting — shows up as the
// failure it is in production rather than passing against Postgres
// alone.
//
// The binary is PGBOUNCER_BIN, else pgbouncer on PATH, else Debian's
// /usr/sbin/pgbouncer (apt-get install pgbouncer, 1.18 on Debian 12: no
// prepared statements in transaction mode). Its configuration is written
// to a directory of the caller's; PgBouncer refuses to run as root, so as
// root it is told to switch to the postgres OS user (or nobody) once it
// has read it.
package pgbouncer
