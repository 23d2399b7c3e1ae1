package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// poolEnv is the environment for worker processes that send to sink.
func poolEnv(t *testing.T, dbURL string, sink *smtpsink.Sink) []string {
	return []string{
		"DATABASE_URL=" + dbURL, "HTTP_ADDR=" + freeAddr(t),
		"SMTP_HOST=127.0.0.1", "SMTP_PORT=" + strconv.Itoa(sink.Port()), "SMTP_TLS=none",
		"WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8", "POLL_INTERVAL=200ms", "SHUTDOWN_TIMEOUT=20s",
	}
}

// replicaName is the application_name of the i-th worker process of a
// test, to tell its server connections in pg_stat_activity.
func replicaName(i int) string { return "worker-" + strconv.Itoa(i) }

// insertEmails enqueues n emails by plain SQL, as any language could.
func insertEmails(t *testing.T, pool *pgxpool.Pool, prefix string, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO email_outbox (kind, customer_id, payload)
		SELECT 'raw', 'cus_' || i, jsonb_build_object('to', 'user' || i || '@example.com',
			'subject', $1 || ' ' || i, 'text', 'hello')
		FROM generate_series(1, $2) AS i`, prefix, n)
	if err != nil {
		t.Fatal(err)
	}
}

// waitEmails waits until no email row is pending, or fails after limit.
func waitEmails(t *testing.T, pool *pgxpool.Pool, limit time.Duration, logs func() string) {
	t.Helper()
	eventually.Explain(t, "no email pending", limit, func() bool { return countStatus(t, pool, "pending") == 0 },
		func() string {
			return fmt.Sprintf("%d emails pending; logs:\n%s", countStatus(t, pool, "pending"), logs())
		})
}

func countStatus(t *testing.T, pool *pgxpool.Pool, status string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM email_outbox WHERE status = $1`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// processLogs prints what each worker process in *outs wrote, headed by
// what and its index, for a failing test's message.
func processLogs[S fmt.Stringer](outs *[]S, what string) func() string {
	return func() string {
		var b strings.Builder
		for i, o := range *outs {
			fmt.Fprintf(&b, "--- %s %d\n%s\n", what, i, o)
		}
		return b.String()
	}
}

// waitShifts waits until n replicas each run a shift: every replica is up
// and claiming.
func waitShifts(t *testing.T, pool *pgxpool.Pool, n int, logs func() string) {
	t.Helper()
	running := func() int {
		return queryInt(t, pool, `SELECT count(DISTINCT queue) FROM river_job WHERE kind = 'postbox_shift' AND state = 'running'`)
	}
	eventually.Explain(t, fmt.Sprintf("%d replicas each running a shift", n), 2*time.Minute, func() bool { return running() >= n },
		func() string { return fmt.Sprintf("%d run one; logs:\n%s", running(), logs()) })
}

// TestPool_EveryReplicaDrainsAndNoneWaitsForTheLeader starts three worker
// processes on one database, each sending to a relay of its own that takes
// 20 ms a message, with two batches in flight each. A backlog inserted by
// plain SQL is shared: each replica sends at least half its fair share.
// Then the River leader is killed with SIGKILL and more rows are inserted:
// the other two deliver them at once, without waiting out the leader's
// 15 s lease, because no replica's claiming depends on the leader.
func TestPool_EveryReplicaDrainsAndNoneWaitsForTheLeader(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	var (
		workers []*exec.Cmd
		outs    []fmt.Stringer
		sinks   []*smtpsink.Sink
	)
	for i := range 3 {
		sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true, Fault: func(smtpsink.Envelope) error {
			time.Sleep(20 * time.Millisecond) // simulates: a relay answering in 20 ms (the relay, not the machine, is the bound)
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		sinks = append(sinks, sink)
		cmd, out := startWorker(t, append(poolEnv(t, withAppName(t, url, replicaName(i)), sink), "EMAIL_CONCURRENCY=2"), "run")
		workers = append(workers, cmd)
		outs = append(outs, out)
	}
	logs := processLogs(&outs, "worker")
	waitShifts(t, pool, 3, func() string { return "(running)" })

	const backlog = 300
	insertEmails(t, pool, "backlog", backlog)
	waitEmails(t, pool, 60*time.Second, logs)
	for i, sink := range sinks {
		t.Logf("replica %d sent %d of the backlog", i, sink.Len())
		if got := sink.Len(); got < backlog/3/2 {
			t.Errorf("replica %d sent %d of %d rows, want at least half of a third", i, got, backlog)
		}
	}

	var leader string
	if err := pool.QueryRow(context.Background(), `SELECT leader_id FROM river_leader`).Scan(&leader); err != nil {
		t.Fatalf("no River leader: %v", err)
	}
	connections := func(i int) int {
		return queryInt(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, replicaName(i))
	}
	for i := range workers {
		if connections(i) == 0 {
			t.Fatalf("no server connection is named %s: the wait for the killed replica's connections below would see none", replicaName(i))
		}
	}
	killed := -1
	for i, w := range workers {
		if strings.HasSuffix(leader, "-"+strconv.Itoa(w.Process.Pid)) {
			killed = i
			if err := w.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			w.Wait()
		}
	}
	if killed < 0 {
		t.Fatalf("leader %q is none of the three workers", leader)
	}
	// A statement the killed process had sent still runs on its server
	// connection, a claim too: one that starts after the rows below are
	// committed leases them to the dead process, and they wait out its
	// lease, as they should. The replicas' promise is about rows no dead
	// process can claim, so the rows go in once its connections are gone.
	eventually.Explain(t, replicaName(killed)+"'s server connections are gone", time.Minute, func() bool {
		return connections(killed) == 0
	}, logs)
	killedSent := sinks[killed].Len()
	insertEmails(t, pool, "after", 50)
	waitEmails(t, pool, 60*time.Second, logs)
	var stillLeader string
	if err := pool.QueryRow(context.Background(), `SELECT coalesce((SELECT leader_id FROM river_leader), '')`).Scan(&stillLeader); err != nil {
		t.Fatal(err)
	}
	if stillLeader != leader && stillLeader != "" {
		t.Logf("leadership moved to %s before the rows were delivered", stillLeader)
	}
	if n := countStatus(t, pool, "dispatched"); n != backlog+50 {
		t.Errorf("%d rows dispatched, want %d", n, backlog+50)
	}
	if got := sinks[killed].Len(); got != killedSent {
		t.Errorf("the killed replica's relay got %d messages after the kill", got-killedSent)
	}
	distinct := map[string]int{}
	for _, s := range sinks {
		for id, c := range s.CountByRowID() {
			distinct[id] += c
		}
	}
	if len(distinct) != backlog+50 {
		t.Errorf("relays saw %d distinct rows, want %d", len(distinct), backlog+50)
	}
	for i, w := range workers {
		if i != killed {
			w.Process.Signal(syscall.SIGTERM)
			w.Wait()
		}
	}
}

// TestPool_SIGTERMMidDrainLosesAndResendsNothing sends SIGTERM while a slow
// relay is mid-drain: the replica stops claiming, lets started rows finish
// and mark, releases the rest, and exits 0. A second replica finishes the
// job, and every row reaches the relay exactly once.
func TestPool_SIGTERMMidDrainLosesAndResendsNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	sink, err := smtpsink.Start(smtpsink.Options{Fault: func(smtpsink.Envelope) error {
		time.Sleep(50 * time.Millisecond) // simulates: a slow relay, which keeps rows in flight
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	const n = 200
	insertEmails(t, pool, "sigterm", n)

	first, out := startWorker(t, poolEnv(t, url, sink), "run")
	eventually.Explain(t, "20 emails at the relay: the drain under way", 2*time.Minute, func() bool { return sink.Len() >= 20 }, out.String)
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("worker exited with %v after SIGTERM; logs:\n%s", err, out)
	}
	sent := countStatus(t, pool, "dispatched")
	if sent >= n {
		t.Fatalf("all %d rows were sent before SIGTERM took effect; the test proves nothing", n)
	}
	if sent != sink.Len() {
		t.Errorf("after SIGTERM: %d rows dispatched but the relay has %d messages: a started row did not mark", sent, sink.Len())
	}
	var leased int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM email_outbox
		WHERE status = 'pending' AND next_attempt_at > now()`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Errorf("%d rows left leased after a graceful stop; they should have been released", leased)
	}

	second, out2 := startWorker(t, poolEnv(t, url, sink), "run")
	waitEmails(t, pool, 60*time.Second, func() string { return out.String() + out2.String() })
	second.Process.Signal(syscall.SIGTERM)
	second.Wait()

	if d := countStatus(t, pool, "dispatched"); d != n {
		t.Errorf("%d rows dispatched, want %d", d, n)
	}
	for id, c := range sink.CountByRowID() {
		if c != 1 {
			t.Errorf("row %s reached the relay %d times", id, c)
		}
	}
	if got := len(sink.CountByRowID()); got != n {
		t.Errorf("relay saw %d distinct rows, want %d", got, n)
	}
}

// A `worker run` replica is woken by the insert trigger: with its poll an
// hour, a row inserted by plain SQL once the replica is idle is still sent.
func TestRun_PlainInsertWakesTheReplica(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	env := append(poolEnv(t, url, sink), "POLL_INTERVAL=1h")
	cmd, out := startWorker(t, env, "run")
	waitShifts(t, pool, 1, func() string { return "(running)" })
	// Past the lane's hot spell after its start: only a wake-up claims now.
	time.Sleep(3 * time.Second) // simulates: time passing for the lane's hot spell after its start (2 s)
	insertEmails(t, pool, "woken", 1)
	waitEmails(t, pool, 30*time.Second, func() string { return "(see the worker's log after it stops)" })
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker: %v\n%s", err, out)
	}
	if sink.Len() != 1 {
		t.Fatalf("relay got %d messages, want 1", sink.Len())
	}
}
