// Package pgserver finds a Postgres server to talk to, or starts a
// throwaway one from the installed binaries. The test harness and the
// `worker demo` command both use it, so a newcomer's machine with Postgres
// installed but not running still works.
//
// Order: $TEST_DATABASE_URL, $DATABASE_URL, postgres on 127.0.0.1:5432,
// then a throwaway cluster (initdb + pg_ctl in a temp dir on a free port,
// run as the postgres user when we are root, because initdb refuses root).
package pgserver
