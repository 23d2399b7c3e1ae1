package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/internal/engine/pgsession"
)

// sessionProbeTimeout bounds the boot's session probe. The probe's three
// statements take milliseconds; a pooler whose server connections are all
// busy can make one wait, and then the probe gives up rather than the boot.
const sessionProbeTimeout = 10 * time.Second

// errTransactionPooler is what checkSessionPooling finds behind a
// DATABASE_URL said to be a session: a transaction pooler, whose next
// transaction may run on another server connection than the last, so a
// statement pgx prepared on one is missing on the other ("prepared
// statement stmtcache_… does not exist") and a LISTEN hears nothing.
var errTransactionPooler = errors.New("DATABASE_URL is a transaction pooler (one connection's transactions ran on different Postgres backends), " +
	"but " + pooling.EnvPoolMode + " is session: set " + pooling.EnvPoolMode + "=transaction (docs/OPERATIONS.md, \"PgBouncer\"), " +
	"or point DATABASE_URL at Postgres or at a pool in session mode")

// checkSessionPooling refuses, in session mode, a DATABASE_URL that is a
// transaction pooler. A session keeps its backend for its life; a
// transaction pooler hands a backend to one transaction at a time. So the
// probe asks connection A its backend, then opens a transaction on
// connection B and holds it while A asks again: a transaction pooler gives
// B the backend A has just let go (PgBouncer hands out the most recently
// used one first), or else, that backend or not, may give A another one.
// Behind Postgres or a session pooler, B never gets A's backend and A
// keeps its own (pgsession.BackendOf, sent unprepared, so the probe itself
// cannot trip over a statement prepared on another backend).
//
// A probe that cannot finish in sessionProbeTimeout (a pooler with every
// server connection busy) is logged and the boot goes on: a probe that
// decides nothing must not stop a replica that may be right.
func checkSessionPooling(ctx context.Context, log *slog.Logger, p pooling.Config, pool *pgxpool.Pool) error {
	if p.Transaction() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, sessionProbeTimeout)
	defer cancel()
	moved, err := backendMoves(ctx, pool)
	switch {
	case moved:
		return errTransactionPooler
	case err != nil && ctx.Err() != nil:
		log.Warn("database: could not tell within "+sessionProbeTimeout.String()+" whether DATABASE_URL is a transaction pooler; "+
			"if it is, set "+pooling.EnvPoolMode+"=transaction", "error", err)
		return nil
	case err != nil:
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	return nil
}

// backendMoves reports whether one of pool's connections ran two of its
// transactions on different backends, or lent its backend to another
// connection between them.
func backendMoves(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	a, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer b.Release()

	first, err := pgsession.BackendOf(ctx, a)
	if err != nil {
		return false, err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only; a failed rollback ends the connection
	held, err := pgsession.BackendOf(ctx, tx)
	if err != nil {
		return false, err
	}
	if held == first {
		return true, nil
	}
	again, err := pgsession.BackendOf(ctx, a)
	if err != nil {
		return false, err
	}
	return again != first, nil
}
