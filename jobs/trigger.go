package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// periodicJob is a trigger the leader inserts every interval, and once on
// start so a new leader acts at once. Its ID is its kind: one schedule per
// kind, whichever replica leads.
func periodicJob(interval time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(
		river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return args, nil },
		&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true},
	)
}

// kickFunc inserts the kick args in the enqueueing transaction, for the
// outbox and webhook Enqueuers' Kick; the job becomes visible when that
// transaction commits.
func kickFunc(client *river.Client[pgx.Tx], args river.JobArgs) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		if _, err := client.InsertTx(ctx, tx, args, nil); err != nil {
			return fmt.Errorf("insert %s: %w", args.Kind(), err)
		}
		return nil
	}
}
