// Package pooling reads what the worker's DATABASE_URL reaches:
// DATABASE_POOL_MODE (a Postgres session of its own, or a share of a
// transaction pooler's server connections), DATABASE_DIRECT_URL (the same
// database without the pooler, for what needs a session) and the pgx exec
// mode that follows from both (docs/OPERATIONS.md, "PgBouncer").
//
// Through a transaction pooler, consecutive transactions of one client
// connection may run on different server connections, so what lives in a
// session does not survive: LISTEN, and the named prepared statements pgx
// makes by default. FromEnv picks an exec mode that needs none
// (cache_describe) unless DATABASE_URL chose one, and refuses the modes
// that break postbox through a pooler, each refusal naming its variable
// and never a password. What the worker builds from a Config — where its
// listeners connect, whether River polls — is the command's.
package pooling
