package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/webhook"
)

// A group commits in one transaction; a group with a failing enqueue is
// rolled back and each of its enqueues run alone, so the good ones commit
// and only the bad one gets its error.
func TestGroupCommit_AFailureCostsItsNeighboursOnlyARetry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	g := newGroupCommitter(pool)
	event := func(typ, endpoint string) groupJob {
		return groupJob{done: make(chan groupResult, 1), do: func(ctx context.Context, tx pgx.Tx) (string, error) {
			return webhook.Enqueuer{}.EnqueueEvent(ctx, tx, webhook.Event{Type: typ, Payload: []byte(`{}`), EndpointID: endpoint})
		}}
	}
	var txids []int64
	probe := groupJob{done: make(chan groupResult, 1), do: func(ctx context.Context, tx pgx.Tx) (string, error) {
		var id int64
		err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&id)
		txids = append(txids, id)
		return "", err
	}}
	good := []groupJob{event("a.one", ""), probe, event("a.two", "")}
	g.commit(good)
	for i, j := range good {
		if r := <-j.done; r.err != nil {
			t.Fatalf("job %d: %v", i, r.err)
		}
	}
	var rows, txs int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM webhook_outbox`).Scan(&rows, &txs); err != nil || rows != 2 || txs != 1 {
		t.Fatalf("a group of two events: %d rows in %d transactions (%v), want 2 in 1", rows, txs, err)
	}

	// One that fails in the database, aborting the transaction it is in.
	bad := groupJob{done: make(chan groupResult, 1), do: func(ctx context.Context, tx pgx.Tx) (string, error) {
		_, err := tx.Exec(ctx, `SELECT 1 / 0`)
		return "", err
	}}
	group := []groupJob{event("b.one", ""), bad, event("b.two", "")}
	g.commit(group)
	for i, j := range group {
		r := <-j.done
		if wantErr := i == 1; (r.err != nil) != wantErr || (wantErr && !strings.Contains(r.err.Error(), "division by zero")) {
			t.Errorf("job %d of a group with a bad one: %q, %v", i, r.id, r.err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox WHERE event_type LIKE 'b.%'`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("the good neighbours of a bad enqueue: %d rows (%v), want 2", rows, err)
	}
}

// Enqueues that are waiting when the committers start share commits: 40
// of them in fewer than 40 transactions.
func TestGroupCommit_WaitingEnqueuesShareACommit(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	g := newGroupCommitter(pool)
	const n = 40
	var jobs []groupJob
	for range n {
		j := groupJob{done: make(chan groupResult, 1), do: func(ctx context.Context, tx pgx.Tx) (string, error) {
			return webhook.Enqueuer{}.EnqueueEvent(ctx, tx, webhook.Event{Type: "a.one", Payload: []byte(`{}`)})
		}}
		g.queue <- j
		jobs = append(jobs, j)
	}
	g.start()
	for _, j := range jobs {
		if r := <-j.done; r.err != nil {
			t.Fatal(r.err)
		}
	}
	var rows, txs int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT xmin::text) FROM webhook_outbox`).Scan(&rows, &txs); err != nil || rows != n || txs >= n {
		t.Fatalf("%d waiting enqueues: %d rows in %d transactions (%v), want %d rows in fewer", n, rows, txs, err, n)
	}
}
