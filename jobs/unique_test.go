package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// leaveDeadTick inserts an email tick and makes it look like its worker was
// killed with SIGKILL mid-drain: running, owned by a process that is gone.
// River rescues such a job only after RescueStuckJobsAfter, which must
// exceed the job's lease-derived timeout — minutes.
func leaveDeadTick(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Inserted on a queue nobody works, so the running client cannot take
	// it before it is made to look dead; its unique key is the same.
	opts := EmailTickArgs{}.InsertOpts()
	opts.Queue = "postbox_parking"
	if _, err := inserter.Insert(ctx, EmailTickArgs{}, &opts); err != nil {
		t.Fatal(err)
	}
	tag, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', queue = $2, attempt = 1,
		attempted_at = now(), attempted_by = '{killed-worker}' WHERE kind = $1`, EmailTickArgs{}.Kind(), QueueEmail)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("make the tick look dead: %v (%d rows)", err, tag.RowsAffected())
	}
}

// TestTick_DeadRunningTickDoesNotStallDelivery: a worker killed mid-drain
// leaves its tick "running". Uniqueness must not let that corpse block the
// next ticks until River rescues it; delivery resumes within UniquePeriod.
func TestTick_DeadRunningTickDoesNotStallDelivery(t *testing.T) {
	t.Parallel()
	ctx := emailTestCtx(t)
	e := startE2E(t, ctx, nil) // no periodic job yet: the corpse goes in first
	leaveDeadTick(t, ctx, e.pool)
	e.client.PeriodicJobs().Add(EmailPeriodicJob(150 * time.Millisecond))

	id := insertEmail(t, ctx, e.pool, "ada@example.com")
	deadline := time.Now().Add(2*UniquePeriod + 5*time.Second)
	for emailStatus(t, ctx, e.pool, id) != "dispatched" {
		if time.Now().After(deadline) {
			t.Fatalf("row %s not delivered %s after a dead tick was left running: ticks are blocked by it",
				id, 2*UniquePeriod+5*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
