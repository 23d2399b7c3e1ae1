package soak

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// stuckWatch measures what a kill -9 does to River, which explains the
// pauses in delivery the progress lines show:
//   - a job that was running on the killed worker (a shift, a pass) stays
//     "running" until River's rescuer discards it (RescueStuckJobsAfter:
//     the longest job timeout plus LeaseSlack); the soak shows it held
//     back nothing: the killed replica's shifts are its own, and the
//     passes are gated by a lease, not by the job;
//   - when the leader is killed, no periodic pass is inserted until its
//     leadership expires and another replica is elected (River's leader
//     TTL is 15 s); every other replica's lanes deliver meanwhile.
//
// It polls river_job and river_leader once a second.
type stuckWatch struct {
	mu      sync.Mutex
	longest map[string]time.Duration // per job kind: longest seen running on a dead worker
	now     []string                 // current, for the status line

	lastPoll          time.Time
	leaderless        time.Duration // total time with no live leader
	leaderlessSince   time.Time     // zero while a live leader holds
	leaderlessLongest time.Duration
}

func (r *run) watchStuck(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.pollStuck(ctx)
	}
}

func (r *run) pollStuck(ctx context.Context) {
	_, procs := r.fleet.snapshot()
	dead := map[int]bool{}
	for _, p := range procs {
		select {
		case <-p.done:
			dead[p.pid] = true
		default:
		}
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r.pollLeader(qctx, dead)
	rows, err := r.pool.Query(qctx, `SELECT kind, coalesce(attempted_by[array_length(attempted_by, 1)], ''),
	extract(epoch FROM now() - attempted_at)::float8
FROM river_job WHERE state = 'running'`)
	if err != nil {
		return
	}
	defer rows.Close()
	var now []string
	r.stuck.mu.Lock()
	defer r.stuck.mu.Unlock()
	for rows.Next() {
		var kind, by string
		var age float64
		if rows.Scan(&kind, &by, &age) != nil {
			return
		}
		pid := clientPID(by)
		if !dead[pid] {
			continue
		}
		d := time.Duration(age * float64(time.Second)).Round(time.Second)
		if d > r.stuck.longest[kind] {
			r.stuck.longest[kind] = d
		}
		now = append(now, fmt.Sprintf("%s on dead pid %d for %s", strings.TrimPrefix(kind, "postbox_"), pid, d))
	}
	slices.Sort(now)
	r.stuck.now = now
}

// pollLeader notes whether a live worker leads River right now.
func (r *run) pollLeader(ctx context.Context, dead map[int]bool) {
	var leader string
	err := r.pool.QueryRow(ctx, `SELECT coalesce(max(leader_id), '') FROM river_leader WHERE expires_at > now()`).Scan(&leader)
	if err != nil {
		return // the database is restarting: no verdict
	}
	pid := clientPID(leader)
	now := time.Now()
	s := &r.stuck
	s.mu.Lock()
	defer s.mu.Unlock()
	if leader == "" || dead[pid] {
		if s.leaderlessSince.IsZero() {
			s.leaderlessSince = now
		}
		if !s.lastPoll.IsZero() {
			s.leaderless += now.Sub(s.lastPoll)
		}
		s.leaderlessLongest = max(s.leaderlessLongest, now.Sub(s.leaderlessSince))
	} else {
		s.leaderlessSince = time.Time{}
	}
	s.lastPoll = now
}

// leaderGap is how long River has had no live leader, now and in total.
func (s *stuckWatch) leaderGap() (now, total, longest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leaderlessSince.IsZero() {
		now = time.Since(s.leaderlessSince)
	}
	return now, s.leaderless, s.leaderlessLongest
}

func (s *stuckWatch) current() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *stuckWatch) snapshot() map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Duration, len(s.longest))
	for k, v := range s.longest {
		out[k] = v
	}
	return out
}

// clientPID is the pid in a River client id, which cmd/worker makes
// host-pid (replicaID); -1 when the id has none.
func clientPID(id string) int {
	i := strings.LastIndexByte(id, '-')
	pid, err := strconv.Atoi(id[i+1:])
	if i < 0 || err != nil {
		return -1
	}
	return pid
}
