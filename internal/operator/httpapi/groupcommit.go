package httpapi

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// Enqueues over HTTP commit in groups: the enqueues waiting when a
// committer is free go into one transaction, one commit (and one WAL
// flush) for all of them, and each is answered once that commit is done —
// the promise of a 202 is unchanged. Nothing waits for a group to fill:
// a committer takes what is waiting and goes, so an enqueue alone is its
// own group, as fast as before, and groups grow only when enqueues queue
// up behind busy committers. A group in which any enqueue fails is rolled
// back whole and each of its enqueues run again alone, so every request
// gets its own answer and a bad one costs its neighbours only a retry.
const (
	committers    = 4
	maxGroup      = 64
	commitTimeout = 10 * time.Second
)

// enqueueFunc writes one row in tx and returns its id.
type enqueueFunc func(ctx context.Context, tx pgx.Tx) (string, error)

type groupJob struct {
	do   enqueueFunc
	done chan groupResult
}

type groupResult struct {
	id  string
	err error
}

// groupCommitter runs enqueues in groups on db.
type groupCommitter struct {
	db    claim.DB
	queue chan groupJob
	once  sync.Once
}

func newGroupCommitter(db claim.DB) *groupCommitter {
	return &groupCommitter{db: db, queue: make(chan groupJob, committers*maxGroup)}
}

// start starts the committers, once; they live as long as the process.
func (g *groupCommitter) start() {
	g.once.Do(func() {
		for range committers {
			go g.loop()
		}
	})
}

// enqueue runs do in the next group and returns its row's id once the
// group has committed, or ctx's error if the caller gave up first (the
// row may then still commit: a retry with its idempotency key finds it).
func (g *groupCommitter) enqueue(ctx context.Context, do enqueueFunc) (string, error) {
	g.start()
	job := groupJob{do: do, done: make(chan groupResult, 1)}
	select {
	case g.queue <- job:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	select {
	case r := <-job.done:
		return r.id, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (g *groupCommitter) loop() {
	for first := range g.queue {
		group := []groupJob{first}
	more:
		for len(group) < maxGroup {
			select {
			case j := <-g.queue:
				group = append(group, j)
			default:
				break more
			}
		}
		g.commit(group)
	}
}

// commit runs group in one transaction; if any of it fails, each alone.
func (g *groupCommitter) commit(group []groupJob) {
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	ids := make([]string, len(group))
	err := pgx.BeginFunc(ctx, g.db, func(tx pgx.Tx) error {
		for i, j := range group {
			id, err := j.do(ctx, tx)
			if err != nil {
				return err
			}
			ids[i] = id
		}
		return nil
	})
	if err == nil {
		for i, j := range group {
			j.done <- groupResult{id: ids[i]}
		}
		return
	}
	if len(group) == 1 {
		group[0].done <- groupResult{err: err}
		return
	}
	for _, j := range group {
		var id string
		err := pgx.BeginFunc(ctx, g.db, func(tx pgx.Tx) error {
			var err error
			id, err = j.do(ctx, tx)
			return err
		})
		j.done <- groupResult{id: id, err: err}
	}
}
