package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
)

// markGroups is the dispatcher's group commit for marks (claim.Group): the
// marks of batches finishing at once share one pipeline and one commit,
// each keeping its own CAS guard, and each retried alone on the connection
// (claim.RetryMark).
type markGroups struct{ *claim.Group }

func newMarkGroups(db DB, maxWriters int, logger *slog.Logger) *markGroups {
	return &markGroups{claim.NewGroup(db, maxWriters, logger)}
}

// mark runs m in the next group, and again if the group failed on the
// connection, until m.Until (claim.Group.Mark). It returns the row's age.
func (g *markGroups) mark(ctx context.Context, m *claim.Mark) (age time.Duration, err error) {
	err = g.Mark(ctx, readAge(m, &age))
	return age, err
}

// markWriters is how many group commits a dispatcher with concurrency
// batches keeps on the wire at once (claim.Writers).
func markWriters(concurrency int) int { return claim.Writers(concurrency) }

// PoolConnections is how many pool connections a Dispatcher of this
// Concurrency keeps busy at once in steady work: its lane's claim and its
// mark writers. Each batch's own reads (a suppression re-check, a release)
// are single short statements that wait for a free connection rather than
// hold one, so they are not counted; nothing in the Dispatcher holds one
// connection while it waits for a second, so a pool of any size cannot
// deadlock it.
func PoolConnections(concurrency int) int {
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	return 1 + markWriters(concurrency)
}
