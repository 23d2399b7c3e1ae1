// Package pgsession tells Postgres sessions apart: which database and
// server a connection reaches (Database), and which server backend a
// statement ran on (Backend). The worker asks them at boot, to refuse a
// DATABASE_DIRECT_URL that reaches another database than DATABASE_URL, and
// a transaction pooler said to be a session (docs/OPERATIONS.md,
// "PgBouncer"). They read the server's catalogs only, no table of ours.
package pgsession
