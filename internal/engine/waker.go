package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
)

// WakeChannel is the channel the outbox tables' insert triggers notify
// (migration 00005); the payload is the table's name.
const WakeChannel = "postbox_wake"

// wakeReconnectDelay is how long the Waker waits before reconnecting after
// losing its connection. Lanes poll meanwhile, so a lost listener costs
// latency, never a row.
const wakeReconnectDelay = time.Second

// Waker holds one LISTEN connection per process and turns postbox_wake
// notifications into wake-ups for the Lanes of the table named. Postgres
// drops notifications while no listener is connected, so on every
// (re)connect it wakes every Lane once: rows committed meanwhile are
// claimed then, not at the next poll.
type Waker struct {
	listener *pgxlisten.Listener
	logger   *slog.Logger

	mu        sync.Mutex
	subs      map[string][]chan struct{}
	listening chan struct{} // closed once the first LISTEN succeeded
	once      sync.Once
}

// NewWaker returns a Waker whose connections come from connect, which must
// return a connection of the Waker's own (not one from a pool).
func NewWaker(connect func(ctx context.Context) (*pgx.Conn, error), logger *slog.Logger) *Waker {
	w := &Waker{logger: logger, subs: map[string][]chan struct{}{}, listening: make(chan struct{})}
	w.listener = &pgxlisten.Listener{
		Connect:        connect,
		ReconnectDelay: wakeReconnectDelay,
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				logger.Warn("wake-up listener: lanes poll until it reconnects", "error", err.Error())
			}
		},
	}
	w.listener.Handle(WakeChannel, w)
	return w
}

// Subscribe returns a channel that receives a value (coalesced: one waiting
// at most) whenever a transaction that inserted into table commits.
func (w *Waker) Subscribe(table string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs[table] = append(w.subs[table], ch)
	w.mu.Unlock()
	return ch
}

// Listen runs until ctx ends, reconnecting as needed.
func (w *Waker) Listen(ctx context.Context) error {
	return w.listener.Listen(ctx)
}

// HandleNotification wakes the Lanes of the notified table.
func (w *Waker) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	w.wake(n.Payload)
	return nil
}

// Listening is closed once the Waker listens: from then on a committed
// insert wakes its Lanes.
func (w *Waker) Listening() <-chan struct{} { return w.listening }

// HandleBacklog wakes every Lane after a (re)connect.
func (w *Waker) HandleBacklog(context.Context, string, *pgx.Conn) error {
	defer w.once.Do(func() { close(w.listening) })
	w.mu.Lock()
	tables := make([]string, 0, len(w.subs))
	for t := range w.subs {
		tables = append(tables, t)
	}
	w.mu.Unlock()
	for _, t := range tables {
		w.wake(t)
	}
	return nil
}

func (w *Waker) wake(table string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.subs[table] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already waiting
		}
	}
}
