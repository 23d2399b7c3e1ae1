package main

import (
	"context"
	"fmt"
	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/cmd/worker/internal/poolsize"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/postbox/postbox/internal/engine/pgsession"
	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/jobs"
)

// What needs a Postgres session of its own — a LISTEN, a long migration —
// and so, behind a transaction pooler, goes to DATABASE_DIRECT_URL or
// does without (docs/OPERATIONS.md, "PgBouncer").

// listeners are what needs a session of its own: the wake-up listener
// (the Waker) and River's notifier (its driver's listener), and how River
// finds jobs without one.
type listeners struct {
	waker    *jobs.Waker
	driver   riverdriver.Driver[pgx.Tx]
	pollOnly bool
	// fetchPoll is River's FetchPollInterval; zero keeps River's default,
	// its fallback behind the notifier.
	fetchPoll time.Duration
	// direct is the pool River's notifier takes its connection from, on
	// DATABASE_DIRECT_URL; nil when it takes it from the replica's pool.
	direct *pgxpool.Pool
}

// newListeners returns the listeners of a replica on pool. In session
// mode both listen on DATABASE_URL; in transaction mode on
// DATABASE_DIRECT_URL, or without it not at all: the lanes poll, and River
// runs PollOnly.
func newListeners(p pooling.Config, pool *pgxpool.Pool, log *slog.Logger) (*listeners, error) {
	wakeLog := log.With("component", "wake")
	switch {
	case !p.Transaction():
		return &listeners{waker: jobs.NewWaker(pool, wakeLog), driver: riverpgxv5.New(pool)}, nil
	case p.DirectURL == "":
		return &listeners{waker: jobs.NoWaker(), driver: riverpgxv5.New(pool), pollOnly: true, fetchPoll: jobs.PollOnlyFetch}, nil
	}
	cfg, err := pgxpool.ParseConfig(p.DirectURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	// River's notifier takes one connection and hijacks it out of the
	// pool; a reconnect takes another. The pool connects on first use.
	cfg.MaxConns, cfg.MinConns = 1, 0
	direct, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	return &listeners{
		waker:  jobs.NewWakerOn(cfg.ConnConfig, wakeLog),
		driver: directNotifier{Driver: riverpgxv5.New(pool), notifier: riverpgxv5.New(direct)},
		direct: direct,
	}, nil
}

// close releases the notifier's pool, after River has stopped.
func (l *listeners) close() {
	if l.direct != nil {
		l.direct.Close()
	}
}

// directNotifier is River's driver on the replica's pool, but with its
// notifier's listener on another pool (DATABASE_DIRECT_URL's): jobs,
// leadership and maintenance go through the pooler, LISTEN does not.
// River's own tests wrap the driver the same way.
type directNotifier struct {
	*riverpgxv5.Driver
	notifier *riverpgxv5.Driver
}

// GetListener is the notifier pool's listener.
func (d directNotifier) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return d.notifier.GetListener(params)
}

// checkDirectURL refuses a DATABASE_DIRECT_URL that does not reach the
// database DATABASE_URL does: its listeners would wait for notifications
// that are sent elsewhere, and the lanes would poll without a word. The
// database's oid and the server's start time (pgsession.Database) tell two
// databases apart, also across a pooler.
func checkDirectURL(ctx context.Context, p pooling.Config, pool *pgxpool.Pool) error {
	if p.DirectURL == "" {
		return nil
	}
	viaPool, err := pgsession.DatabaseOf(ctx, pool)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	if err := pgserver.Ping(ctx, p.DirectURL); err != nil {
		return fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	conn, err := pgserver.Connect(ctx, p.DirectURL)
	if err != nil {
		return fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	viaDirect, err := pgsession.DatabaseOf(ctx, conn)
	if err != nil {
		return fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	if viaPool != viaDirect {
		return fmt.Errorf("%s reaches database %q (oid %d) of a server started at %s, but DATABASE_URL reaches %q (oid %d) of one started at %s: "+
			"it must be the same database, without the pooler", pooling.EnvDirectURL,
			viaDirect.Name, viaDirect.OID, viaDirect.Started, viaPool.Name, viaPool.OID, viaPool.Started)
	}
	return nil
}

// migrationPool is the pool `worker migrate` runs on: DATABASE_DIRECT_URL's
// when it is set, so that a migration (an index built concurrently, a
// long backfill) holds no pooler's server connection and meets none of
// its timeouts. It serves as the command's pool, which Close releases.
func (e *Env) migrationPool(ctx context.Context) (*pgxpool.Pool, error) {
	direct := e.Config.Pooling.DirectURL
	if direct == "" || e.pool != nil {
		return e.Pool(ctx)
	}
	if err := pgserver.Ping(ctx, direct); err != nil {
		return nil, fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	cfg, err := pgxpool.ParseConfig(direct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	cfg.MaxConns = min(cfg.MaxConns, poolsize.CLIConnections)
	cfg.MinConns = min(cfg.MinConns, cfg.MaxConns)
	if e.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", pooling.EnvDirectURL, err)
	}
	e.Logger.Info("migrating over "+pooling.EnvDirectURL+" ("+where(direct)+"), not through the pooler", "database", where(direct))
	return e.pool, nil
}
