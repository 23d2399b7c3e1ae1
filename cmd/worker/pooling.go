package main

import (
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/cmd/worker/internal/poolsize"
	"github.com/postbox/postbox/jobs"
)

// logDatabase logs, once at boot, what the replica's connections reach and
// where its wake-ups come from, then what it may hold of each.
func logDatabase(log *slog.Logger, cfg Config, poolSize int32, need poolsize.Need) {
	p := cfg.Pooling
	mode := pooling.ExecModeName(p.ExecMode)
	if p.ExecModeFromURL {
		mode += " (from DATABASE_URL)"
	}
	attrs := []any{"pool_mode", string(p.Mode), "exec_mode", mode, "database", where(cfg.DatabaseURL)}
	switch {
	case !p.Transaction():
		log.Info("database: "+pooling.EnvPoolMode+"=session, every connection a session of its own; "+
			"wake-ups by LISTEN on DATABASE_URL", append(attrs, "wakeups", "listen")...)
	case p.DirectURL != "":
		log.Info("database: "+pooling.EnvPoolMode+"=transaction, DATABASE_URL is a transaction pooler and statements go in exec mode "+mode+"; "+
			"wake-ups by LISTEN on "+pooling.EnvDirectURL+" ("+where(p.DirectURL)+"), River's notifier too",
			append(attrs, "wakeups", "listen", "direct", where(p.DirectURL))...)
	default:
		log.Info("database: "+pooling.EnvPoolMode+"=transaction, DATABASE_URL is a transaction pooler and statements go in exec mode "+mode+"; "+
			"no "+pooling.EnvDirectURL+", so no LISTEN: wake-ups by polling, idle lanes every POLL_INTERVAL ("+cfg.PollInterval.String()+
			"), River every "+jobs.PollOnlyFetch.String(),
			append(attrs, "wakeups", "poll", "poll_interval", cfg.PollInterval.String(), "river_fetch_poll", jobs.PollOnlyFetch.String())...)
	}

	listeners := poolsize.Listeners(p)
	line := "database connections: a pool of " + strconv.Itoa(int(poolSize))
	if p.Transaction() {
		line += " to the pooler"
	}
	line += " plus " + strconv.Itoa(listeners) + " listeners"
	if p.Transaction() && listeners > 0 {
		line += " on " + pooling.EnvDirectURL
	}
	counts := []any{"pool_max_conns", poolSize, "need", need.Total, "listeners", listeners}
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
