package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Two passes started at once on two replicas: one runs, the other returns at
// once, naming the holder (see docs/design/outbox-transport.md, Retry
// gating).
func TestGate_SecondPassReturnsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a := engine.Gate{DB: pool, Name: "webhook_retry", Owner: "replica-a", Lease: 5 * time.Second}
	b := a
	b.Owner = "replica-b"

	running := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- a.Run(ctx, func(context.Context) error {
			close(running)
			<-release
			return nil
		})
	}()
	<-running
	ran := false
	err := b.Run(ctx, func(context.Context) error { ran = true; return nil })
	var held *engine.GateHeldError
	if !errors.As(err, &held) || !errors.Is(err, engine.ErrGateHeld) || ran {
		t.Fatalf("second pass while the first runs: ran %v, err %v; want a *GateHeldError and no run", ran, err)
	}
	if held.Holder == "" || held.Holder[:len("replica-a")] != "replica-a" {
		t.Errorf("held by %q, want replica-a's pass", held.Holder)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Released: the next pass runs.
	if err := b.Run(ctx, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("pass after release: ran %v, err %v", ran, err)
	}
}

// A holder that dies mid-pass frees the gate within its lease.
func TestGate_DeadHolderFreesTheGateWithinItsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO postbox_gates (name, holder, expires_at)
		VALUES ('webhook_prune', 'dead-replica/1', now() + interval '3 seconds')`); err != nil {
		t.Fatal(err)
	}
	g := engine.Gate{DB: pool, Name: "webhook_prune", Owner: "live", Lease: time.Second}
	if err := g.Run(ctx, func(context.Context) error { return nil }); !errors.Is(err, engine.ErrGateHeld) {
		t.Fatalf("pass inside the dead holder's lease: %v, want ErrGateHeld", err)
	}
	waitLeaseOver(t, pool, "webhook_prune")
	ran := false
	if err := g.Run(ctx, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("pass after the dead holder's lease: ran %v, err %v", ran, err)
	}
}

// waitLeaseOver waits out the lease on gate name, by the database's clock.
func waitLeaseOver(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	eventually.Until(t, "the lease on gate "+name+" over", time.Minute, func() bool {
		var over bool
		if err := pool.QueryRow(context.Background(), `SELECT expires_at <= now() FROM postbox_gates WHERE name = $1`, name).Scan(&over); err != nil {
			t.Fatal(err)
		}
		return over
	})
}

// A pass whose lease is taken from it (here: by an operator deleting the
// row and another holder taking it) has its context cancelled.
func TestGate_LostLeaseCancelsThePass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	g := engine.Gate{DB: pool, Name: "webhook_retry", Owner: "a", Lease: 300 * time.Millisecond}
	err := g.Run(ctx, func(ctx context.Context) error {
		if _, err := pool.Exec(ctx, `UPDATE postbox_gates SET holder = 'b/1' WHERE name = 'webhook_retry'`); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the pass was not cancelled after losing its gate")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A holder whose lease ran out, and whose gate another replica took, does
// not delete the new holder's row when its pass finishes: the release
// names its own holder.
func TestGate_ExpiredHolderLeavesTheNewHoldersRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	g := engine.Gate{DB: pool, Name: "webhook_retry", Owner: "a", Lease: time.Minute}
	err := g.Run(ctx, func(context.Context) error {
		// The lease ran out (a stall) and replica b took the gate.
		_, err := pool.Exec(ctx, `UPDATE postbox_gates SET holder = 'b/1', expires_at = now() + interval '1 minute' WHERE name = 'webhook_retry'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var holder string
	if err := pool.QueryRow(ctx, `SELECT holder FROM postbox_gates WHERE name = 'webhook_retry'`).Scan(&holder); err != nil || holder != "b/1" {
		t.Fatalf("after the old holder finished: holder %q (%v), want b/1's row kept", holder, err)
	}
}

// A renewal runs every Lease/3: a pass longer than its lease keeps the
// gate, so no second holder takes it while the first still runs. The
// lease is long enough (6 s, renewed every 2 s) that only a renewal late
// by 4 s — not a busy machine — lets b in.
func TestGate_RenewalKeepsALongPassExclusive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pass for longer than a 6 s lease")
	}
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a := engine.Gate{DB: pool, Name: "webhook_retry", Owner: "a", Lease: 6 * time.Second}
	b := a
	b.Owner = "b"
	err := a.Run(ctx, func(ctx context.Context) error {
		// Longer than the lease: without renewals b would take the gate.
		deadline := time.Now().Add(7 * time.Second)
		for time.Now().Before(deadline) {
			if err := b.Run(ctx, func(context.Context) error { return errors.New("b ran beside a") }); !errors.Is(err, engine.ErrGateHeld) {
				return fmt.Errorf("b while a runs: %v, want ErrGateHeld", err)
			}
			time.Sleep(200 * time.Millisecond) // simulates: time passing for the lease: b tries every 200 ms through a pass that outlasts it
		}
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Take is a pool-wide schedule: one taker per lease, the next once the
// lease has run out, and nothing to release.
func TestGate_TakeOncePerLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a := engine.Gate{DB: pool, Name: "email_outbox_sweep", Owner: "replica-a", Lease: 300 * time.Millisecond}
	b := a
	b.Owner = "replica-b"
	if ok, err := a.Take(ctx); !ok || err != nil {
		t.Fatalf("first take: %v, %v", ok, err)
	}
	if ok, err := b.Take(ctx); ok || err != nil {
		t.Fatalf("a second take within the lease: %v, %v; want false", ok, err)
	}
	waitLeaseOver(t, pool, "email_outbox_sweep")
	if ok, err := b.Take(ctx); !ok || err != nil {
		t.Fatalf("a take after the lease: %v, %v", ok, err)
	}
}

// A pass that finds the gate held waits for it and takes it the moment the
// holder releases it: the lease (an hour) never runs out, so only the
// release can let it in. The released holder's context stays open, for
// the work it started to finish.
func TestGate_WaitingAcquireTakesTheGateOnRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, a, b := twoHolders(t, time.Hour)
	ha, err := a.Acquire(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		hold *engine.Hold
		err  error
	}
	got := make(chan result, 1)
	go func() {
		h, err := b.Acquire(ctx, time.Now().Add(time.Minute))
		got <- result{h, err}
	}()
	// An ordering, not a speed: b has had several looks at the held gate.
	time.Sleep(3 * engine.GateWaitPoll) // simulates: time passing in which b, waiting, looks at the held gate several times
	select {
	case r := <-got:
		t.Fatalf("b's Acquire returned while a held the gate: %v; want it waiting", r.err)
	default:
	}
	if err := ha.Release(); err != nil {
		t.Fatal(err)
	}
	if err := ha.Context().Err(); err != nil {
		t.Errorf("a's context after Release: %v; want it open for a's work in flight", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("b's Acquire after a released: %v; want the gate", r.err)
	}
	var holder string
	if err := pool.QueryRow(ctx, `SELECT holder FROM postbox_gates WHERE name = 'webhook_retry'`).Scan(&holder); err != nil || !strings.HasPrefix(holder, "b/") {
		t.Fatalf("holder %q (%v), want b's", holder, err)
	}
	if err := ha.Close(); err != nil || ha.Context().Err() == nil {
		t.Errorf("a's Close: %v, context %v; want it ended", err, ha.Context().Err())
	}
	if err := r.hold.Close(); err != nil {
		t.Fatal(err)
	}
}

// A waiting Acquire gives up once its until passes with the gate still
// held, naming the holder.
func TestGate_WaitingAcquireGivesUpAtUntil(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, a, b := twoHolders(t, time.Hour)
	ha, err := a.Acquire(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close() //nolint:errcheck // the test's end
	_, err = b.Acquire(ctx, time.Now().Add(3*engine.GateWaitPoll))
	var held *engine.GateHeldError
	if !errors.As(err, &held) || !strings.HasPrefix(held.Holder, "a/") {
		t.Fatalf("b's Acquire past until: %v; want a *GateHeldError naming a", err)
	}
}

// twoHolders is the retry gate as replicas a and b ask for it, on a
// database of their own.
func twoHolders(t *testing.T, lease time.Duration) (*pgxpool.Pool, engine.Gate, engine.Gate) {
	t.Helper()
	pool := pgtest.NewPool(t)
	a := engine.Gate{DB: pool, Name: "webhook_retry", Owner: "a", Lease: lease}
	b := a
	b.Owner = "b"
	return pool, a, b
}
