package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/testsupport/pgtest"
)

// Two passes started at once on two replicas: one runs, the other returns
// at once, naming the holder (ADR-072 decision 7).
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
	// Wait out the dead holder's lease, by the database's clock.
	for {
		var expired bool
		if err := pool.QueryRow(ctx, `SELECT expires_at <= now() FROM postbox_gates WHERE name = 'webhook_prune'`).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		if expired {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	ran := false
	if err := g.Run(ctx, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("pass after the dead holder's lease: ran %v, err %v", ran, err)
	}
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
	time.Sleep(400 * time.Millisecond)
	if ok, err := b.Take(ctx); !ok || err != nil {
		t.Fatalf("a take after the lease: %v, %v", ok, err)
	}
}
