package claim

import (
	"context"
)

// MarkAlone runs m as a statement and commit of its own on db, with the
// retries, the errors and the landed check of Group.Mark: the one path of
// the exported mark functions (outbox.Mark, webhook.Mark), which have no
// group. It runs on a context detached from ctx's cancellation and bounded
// by leases.MarkTimeout (MarkContext): what was done must be recorded
// even when its caller's context is dead.
func MarkAlone(ctx context.Context, db DB, m *Mark) error {
	return retried(ctx, db, m, func(ctx context.Context) error {
		m.result(db.QueryRow(ctx, m.SQL, m.Args...))
		return m.err
	})
}
