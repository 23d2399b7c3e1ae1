package jobs

import (
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// uniqueStates is the uniqueness of every tick, kick and periodic pass: one
// per kind waiting or running. River's default would also count completed
// jobs, which would block every new tick until the cleaner removed the
// last one (24 h). River requires available, pending, running and
// scheduled; retryable is left out so a pass that failed never blocks the
// next one.
var uniqueStates = []rivertype.JobState{
	rivertype.JobStateAvailable,
	rivertype.JobStatePending,
	rivertype.JobStateRunning,
	rivertype.JobStateScheduled,
}

// UniquePeriod scopes that uniqueness to a time bucket. A worker killed
// mid-drain leaves its job "running" until River rescues it, which must
// wait out the job's timeout (minutes, derived from the leases); without a
// period that dead job would block every new tick of its kind as long. With
// one it blocks only its own bucket, so delivery resumes within a period,
// and at most one job per kind and bucket waits or runs: ticks still never
// pile up, and the few drains that may overlap across buckets are harmless
// because rows are claimed under leases.
const UniquePeriod = 10 * time.Second

// triggerInsertOpts: one attempt, because a failed pass needs no retry of
// its own — the next tick is the retry, and the rows' claim leases and CAS
// marks, not the job, carry every row's state.
func triggerInsertOpts(queue string) river.InsertOpts {
	return river.InsertOpts{
		Queue:       queue,
		MaxAttempts: 1,
		UniqueOpts:  river.UniqueOpts{ByState: uniqueStates, ByPeriod: UniquePeriod},
	}
}
