package main

import (
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/jobs"
)

// The variables that say what DATABASE_URL reaches (docs/OPERATIONS.md,
// "PgBouncer").
const (
	envPoolMode  = "DATABASE_POOL_MODE"
	envDirectURL = "DATABASE_DIRECT_URL"
)

// PoolMode is what a connection to DATABASE_URL is: a Postgres session of
// its own (Postgres itself, or a pooler in session mode), or a share of a
// transaction pooler's server connections, one transaction at a time.
type PoolMode string

// The pool modes DATABASE_POOL_MODE takes, named as PgBouncer's pool_mode.
const (
	PoolSession     PoolMode = "session"
	PoolTransaction PoolMode = "transaction"
)

// Pooling is how the worker reaches Postgres: DATABASE_POOL_MODE,
// DATABASE_DIRECT_URL, and the pgx exec mode of DATABASE_URL's
// connections that follows from them.
type Pooling struct {
	Mode PoolMode
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
func (p Pooling) Transaction() bool { return p.Mode == PoolTransaction }

// poolingFromEnv reads DATABASE_POOL_MODE and DATABASE_DIRECT_URL for
// databaseURL, which has already parsed. Both are read whatever the other
// says, so knownVariables records them.
func poolingFromEnv(get func(name, def string) string, databaseURL string) (Pooling, error) {
	mode, direct := get(envPoolMode, string(PoolSession)), get(envDirectURL, "")
	p := Pooling{Mode: PoolMode(mode), DirectURL: direct}
	switch p.Mode {
	case PoolSession, PoolTransaction:
	case "statement":
		return p, fmt.Errorf("%s=statement: postbox claims, marks and fans out in transactions, which statement pooling breaks apart; "+
			"point DATABASE_URL at a pool in transaction or session mode", envPoolMode)
	default:
		return p, fmt.Errorf("%s=%q: must be session (Postgres, or a pooler in session mode) or transaction (PgBouncer's pool_mode=transaction)", envPoolMode, mode)
	}
	if direct != "" {
		if !p.Transaction() {
			return p, fmt.Errorf("%s is set but %s is session: in session mode DATABASE_URL's connections LISTEN themselves; "+
				"set %s=transaction if DATABASE_URL is a transaction pooler, or unset %s", envDirectURL, envPoolMode, envPoolMode, envDirectURL)
		}
		if _, err := pgxpool.ParseConfig(direct); err != nil {
			return p, fmt.Errorf("%s: %w", envDirectURL, err)
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
				"its describe and its execute on different server connections; leave the key out for cache_describe", envPoolMode)
		default:
			// exec and simple_protocol type parameters by their Go type:
			// a []byte meant for jsonb goes as bytea, and outbox.Enqueue's
			// payload and rekey's patch are []byte.
			return p, fmt.Errorf("DATABASE_URL: default_query_exec_mode=%s types parameters by their Go type, which postbox's JSON "+
				"written as bytes does not survive; leave the key out for cache_describe, or use cache_statement with a pooler "+
				"that keeps prepared statements", execModeName(p.ExecMode))
		}
	}
	return p, nil
}

// execModeName is m as default_query_exec_mode spells it.
func execModeName(m pgx.QueryExecMode) string {
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

// listenerCount is the connections a replica holds beside its pool: the
// wake-up listener's and River's notifier's, on DATABASE_URL in session
// mode, on DATABASE_DIRECT_URL in transaction mode, none without one.
func (p Pooling) listenerCount() int {
	if p.Transaction() && p.DirectURL == "" {
		return 0
	}
	return listenerConnections
}

// logDatabase logs, once at boot, what the replica's connections reach and
// where its wake-ups come from, then what it may hold of each.
func logDatabase(log *slog.Logger, cfg Config, poolSize int32, need connectionNeed) {
	p := cfg.Pooling
	mode := execModeName(p.ExecMode)
	if p.ExecModeFromURL {
		mode += " (from DATABASE_URL)"
	}
	attrs := []any{"pool_mode", string(p.Mode), "exec_mode", mode, "database", where(cfg.DatabaseURL)}
	switch {
	case !p.Transaction():
		log.Info("database: "+envPoolMode+"=session, every connection a session of its own; "+
			"wake-ups by LISTEN on DATABASE_URL", append(attrs, "wakeups", "listen")...)
	case p.DirectURL != "":
		log.Info("database: "+envPoolMode+"=transaction, DATABASE_URL is a transaction pooler and statements go in exec mode "+mode+"; "+
			"wake-ups by LISTEN on "+envDirectURL+" ("+where(p.DirectURL)+"), River's notifier too",
			append(attrs, "wakeups", "listen", "direct", where(p.DirectURL))...)
	default:
		log.Info("database: "+envPoolMode+"=transaction, DATABASE_URL is a transaction pooler and statements go in exec mode "+mode+"; "+
			"no "+envDirectURL+", so no LISTEN: wake-ups by polling, idle lanes every POLL_INTERVAL ("+cfg.PollInterval.String()+
			"), River every "+jobs.PollOnlyFetch.String(),
			append(attrs, "wakeups", "poll", "poll_interval", cfg.PollInterval.String(), "river_fetch_poll", jobs.PollOnlyFetch.String())...)
	}

	listeners := p.listenerCount()
	line := "database connections: a pool of " + strconv.Itoa(int(poolSize))
	if p.Transaction() {
		line += " to the pooler"
	}
	line += " plus " + strconv.Itoa(listeners) + " listeners"
	if p.Transaction() && listeners > 0 {
		line += " on " + envDirectURL
	}
	counts := []any{"pool_max_conns", poolSize, "need", need.total, "listeners", listeners}
	if p.Transaction() {
		// The pool's connections are the pooler's clients; the server
		// connections behind them are the pooler's to size.
		counts = append(counts, "pooler_connections_max", int(poolSize), "direct_connections_max", listeners)
	} else {
		counts = append(counts, "server_connections_max", int(poolSize)+listeners)
	}
	log.Info(line+"; the replica needs "+need.String(), counts...)
}

// where is a database URL as logs show it: host, port and database, never
// the user's password or the URL's other parameters.
func where(url string) string {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return "(a URL that does not parse)"
	}
	c := cfg.ConnConfig
	return c.Host + ":" + strconv.Itoa(int(c.Port)) + "/" + c.Database
}
