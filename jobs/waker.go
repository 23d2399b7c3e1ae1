package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/webhook"
)

// Waker is one process's LISTEN connection for the outbox tables'
// wake-ups (migration 00005): pass Email to outbox.Config.Wake, Webhook
// to webhook.Config.Wake and Deliveries to webhook.Config.RetryWake, then
// run Listen for the process's life.
type Waker struct {
	w       *engine.Waker
	logger  *slog.Logger
	Email   <-chan struct{}
	Webhook <-chan struct{}
	// Deliveries is woken when an ordered delivery hands its key on to
	// the next (migration 00023): the retry lane claims that one now.
	Deliveries <-chan struct{}
}

// NewWaker returns a Waker whose connection is configured like pool's but
// is its own.
func NewWaker(pool *pgxpool.Pool, logger *slog.Logger) *Waker {
	return NewWakerOn(pool.Config().ConnConfig, logger)
}

// NewWakerOn returns a Waker whose connection is made from cfg. It is for
// a pool that cannot LISTEN — one behind a transaction pooler, which hands
// each transaction whichever server connection is free, so a LISTEN would
// stay behind on one nobody reads — with cfg a direct connection to the
// same database.
func NewWakerOn(cfg *pgx.ConnConfig, logger *slog.Logger) *Waker {
	w := engine.NewWaker(func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, cfg.Copy())
	}, logger)
	return &Waker{w: w, logger: logger, Email: w.Subscribe(LaneEmail), Webhook: w.Subscribe(LaneWebhook),
		Deliveries: w.Subscribe(webhook.DeliveriesTable)}
}

// NoWaker returns a Waker that never wakes a lane, for a process with no
// connection it could LISTEN on: its nil channels leave the lanes to
// their polls (outbox.Config.Poll), which then carry every row's latency.
// Listen returns at once, and Listening never closes.
func NoWaker() *Waker { return &Waker{} }

// Listening is closed once the Waker listens.
func (w *Waker) Listening() <-chan struct{} {
	if w.w == nil {
		return nil
	}
	return w.w.Listening()
}

// Listen listens until ctx ends, reconnecting after connection loss and
// recovering from panics: a lost listener costs latency (the lanes poll),
// never a row, and never the process.
func (w *Waker) Listen(ctx context.Context) {
	if w.w == nil {
		return
	}
	for ctx.Err() == nil {
		func() {
			defer func() {
				if v := recover(); v != nil {
					w.logger.Error("wake-up listener panicked; restarting it", "panic", fmt.Sprint(v))
				}
			}()
			_ = w.w.Listen(ctx)
		}()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
