package pooling

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The variables that say what DATABASE_URL reaches (docs/OPERATIONS.md,
// "PgBouncer").
const (
	EnvPoolMode  = "DATABASE_POOL_MODE"
	EnvDirectURL = "DATABASE_DIRECT_URL"
)

// Mode is what a connection to DATABASE_URL is: a Postgres session of
// its own (Postgres itself, or a pooler in session mode), or a share of a
// transaction pooler's server connections, one transaction at a time.
type Mode string

// The pool modes DATABASE_POOL_MODE takes, named as PgBouncer's pool_mode.
const (
	Session     Mode = "session"
	Transaction Mode = "transaction"
)

// Config is how the worker reaches Postgres: DATABASE_POOL_MODE,
// DATABASE_DIRECT_URL, and the pgx exec mode of DATABASE_URL's
// connections that follows from them.
type Config struct {
	Mode Mode
	// DirectURL reaches the same database without the pooler, for what
	// needs a session: the wake-up listener, River's notifier and the
	// migrations. Empty: there is none, and the replica polls.
	DirectURL string
	// ExecMode is how DATABASE_URL's connections send statements;
	// ExecModeFromURL says the URL chose it (default_query_exec_mode).
	ExecMode        pgx.QueryExecMode
	ExecModeFromURL bool
}

// Transaction reports DATABASE_POOL_MODE=transaction.
func (p Config) Transaction() bool { return p.Mode == Transaction }

// FromEnv reads DATABASE_POOL_MODE and DATABASE_DIRECT_URL for
// databaseURL, which has already parsed. Both are read whatever the other
// says, so the worker's list of the variables it reads (recorded from
// what its configuration asks get for) holds them.
func FromEnv(get func(name, def string) string, databaseURL string) (Config, error) {
	mode, direct := get(EnvPoolMode, string(Session)), get(EnvDirectURL, "")
	p := Config{Mode: Mode(mode), DirectURL: direct}
	switch p.Mode {
	case Session, Transaction:
	case "statement":
		return p, fmt.Errorf("%s=statement: postbox claims, marks and fans out in transactions, which statement pooling breaks apart; "+
			"point DATABASE_URL at a pool in transaction or session mode", EnvPoolMode)
	default:
		return p, fmt.Errorf("%s=%q: must be session (Postgres, or a pooler in session mode) or transaction (PgBouncer's pool_mode=transaction)", EnvPoolMode, mode)
	}
	if direct != "" {
		if !p.Transaction() {
			return p, fmt.Errorf("%s is set but %s is session: in session mode DATABASE_URL's connections LISTEN themselves; "+
				"set %s=transaction if DATABASE_URL is a transaction pooler, or unset %s", EnvDirectURL, EnvPoolMode, EnvPoolMode, EnvDirectURL)
		}
		if _, err := pgxpool.ParseConfig(direct); err != nil {
			return p, fmt.Errorf("%s: %w", EnvDirectURL, err)
		}
	}
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return p, fmt.Errorf("DATABASE_URL: %w", err)
	}
	// pgx's own parse takes the key out of the runtime parameters, so
	// whether the URL wrote it is read from pgconn's, which keep it.
	raw, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return p, fmt.Errorf("DATABASE_URL: %w", err)
	}
	_, p.ExecModeFromURL = raw.RuntimeParams["default_query_exec_mode"]
	p.ExecMode = cfg.DefaultQueryExecMode
	if p.Transaction() && !p.ExecModeFromURL {
		// pgx's default names a prepared statement on each connection,
		// which the pooler's next transaction may not run on (PgBouncer
		// before 1.21 keeps no prepared statements). cache_describe
		// sends each statement unnamed with its parameter types, as
		// described once per connection: one round trip, and the same
		// server-typed encoding as a session's.
		p.ExecMode = pgx.QueryExecModeCacheDescribe
	}
	if p.Transaction() {
		switch p.ExecMode {
		case pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeCacheStatement:
		case pgx.QueryExecModeDescribeExec:
			return p, fmt.Errorf("DATABASE_URL: default_query_exec_mode=describe_exec is unsafe with %s=transaction: the pooler may run "+
				"its describe and its execute on different server connections; leave the key out for cache_describe", EnvPoolMode)
		default:
			// exec and simple_protocol type parameters by their Go type:
			// a []byte meant for jsonb goes as bytea, and outbox.Enqueue's
			// payload and rekey's patch are []byte.
			return p, fmt.Errorf("DATABASE_URL: default_query_exec_mode=%s types parameters by their Go type, which postbox's JSON "+
				"written as bytes does not survive; leave the key out for cache_describe, or use cache_statement with a pooler "+
				"that keeps prepared statements", ExecModeName(p.ExecMode))
		}
	}
	return p, nil
}

// ExecModeName is m as default_query_exec_mode spells it.
func ExecModeName(m pgx.QueryExecMode) string {
	switch m {
	case pgx.QueryExecModeCacheStatement:
		return "cache_statement"
	case pgx.QueryExecModeCacheDescribe:
		return "cache_describe"
	case pgx.QueryExecModeDescribeExec:
		return "describe_exec"
	case pgx.QueryExecModeExec:
		return "exec"
	case pgx.QueryExecModeSimpleProtocol:
		return "simple_protocol"
	}
	return m.String()
}
