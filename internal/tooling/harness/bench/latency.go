package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/jobs"
	"github.com/postbox/postbox/outbox"
)

// appConns is the application side's pool and goroutines in the latency
// section: enough that an enqueue waiting on its commit never holds back
// the offered load (the generator is open-loop up to this many in flight).
const appConns = 16

// latency runs the offered-load generator for every rate against an
// in-process dispatcher woken by the insert trigger.
func (r *runner) latency(ctx context.Context) error {
	for i, rate := range r.opts.Rates {
		if i > 0 {
			if err := r.truncate(ctx); err != nil {
				return err
			}
		}
		if err := r.latencyRun(ctx, rate); err != nil {
			return err
		}
	}
	return nil
}

// latencyRun is one rate: a dispatcher run as a replica's email lane runs
// it (woken by the insert trigger through a Waker, polling otherwise) and
// an application that enqueues rate emails a second, each in its own
// transaction, for Duration. Each row's latency is its enqueue commit
// (taken when Commit returns) to the sink accepting its DATA, matched by
// the Message-ID's row id.
func (r *runner) latencyRun(ctx context.Context, rate int) error {
	trigger := "wake-up trigger"
	pool, err := r.pool(ctx, r.opts.PoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	app, err := r.pool(ctx, appConns)
	if err != nil {
		return err
	}
	defer app.Close()
	rl, err := r.relay()
	if err != nil {
		return err
	}
	defer rl.close()

	waker := jobs.NewWaker(pool, discard)
	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: rl.mailer, Leases: r.leases(), Wake: waker.Email, Logger: discard})
	if err != nil {
		return err
	}
	var enq outbox.Enqueuer
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	go waker.Listen(runCtx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_, _ = d.Run(runCtx, 0)
	}()
	defer func() {
		d.Stop()
		<-ran
	}()
	time.Sleep(200 * time.Millisecond) // the listener connects

	r.logf("latency: %d msg/s for %s, %s", rate, r.opts.Duration, trigger)
	total := int(float64(rate) * r.opts.Duration.Seconds())
	commits, achieved, err := generate(ctx, app, &enq, r.message, rate, total)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := rl.sink.WaitFor(wctx, total); err != nil {
		return checkf("latency %d/s %s: %d of %d messages arrived within 60 s after the load ended", rate, trigger, rl.sink.Len(), total)
	}
	note, err := checkSink(rl.sink, total)
	if err != nil {
		return fmt.Errorf("latency %d/s %s: %w", rate, trigger, err)
	}
	lat := make([]time.Duration, 0, total)
	for _, m := range rl.sink.Messages() {
		c, ok := commits[m.RowID]
		if !ok {
			return checkf("latency: the sink got row %q that the generator did not enqueue", m.RowID)
		}
		lat = append(lat, m.At.Sub(c))
	}
	ps := percentiles(lat, 50, 95, 99)
	path := fmt.Sprintf("%d msg/s, in-process lane, wake-up trigger", rate)
	r.add(Row{Section: "latency commit→DATA", Path: path,
		Figure: fmtMs(ps[0]) + " / " + fmtMs(ps[1]) + " / " + fmtMs(ps[2]), Unit: "ms p50/p95/p99",
		Notes: fmt.Sprintf("%d enqueued over %s (achieved %.0f/s), %s; max %s ms", total, r.opts.Duration, achieved, note, fmtMs(percentiles(lat, 100)[0]))})
	return nil
}

// generate offers total enqueues at rate a second, open-loop (openLoop),
// each by enq in a transaction of its own, from appConns goroutines. It
// returns each row's commit time by row id and the rate achieved.
func generate(ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, enq *outbox.Enqueuer, message func(int) outbox.Email, rate, total int) (map[string]time.Time, float64, error) {
	return openLoop(ctx, rate, total, appConns, func(ctx context.Context, i int) (string, error) {
		var id string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			id, err = enq.Enqueue(ctx, tx, message(i))
			return err
		})
		return id, err
	})
}
