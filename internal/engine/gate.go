package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// ErrGateHeld is matched (errors.Is) by Gate.Run's error when another
// holder has the gate: the caller's pass did not run, by design.
var ErrGateHeld = errors.New("gate held elsewhere")

// GateHeldError names who holds the gate and until when.
type GateHeldError struct {
	Gate, Holder string
	Until        time.Time
}

func (e *GateHeldError) Error() string {
	return fmt.Sprintf("gate %s held by %s until %s", e.Gate, e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrGateHeld) true.
func (e *GateHeldError) Is(target error) bool { return target == ErrGateHeld }

// Gate is pool-wide mutual exclusion for a periodic pass (see
// docs/design/outbox-transport.md, Retry gating): a row in postbox_gates
// names its holder and a lease. The holder renews the lease while it runs and
// deletes the row when done; a holder that dies frees the gate when its lease
// runs out.
type Gate struct {
	DB    claim.DB
	Name  string        // e.g. "webhook_retry"
	Owner string        // who asks, for the holder column (the replica id)
	Lease time.Duration // renewed every Lease/3
}

const acquireGateSQL = `INSERT INTO postbox_gates (name, holder, expires_at) VALUES ($1, $2, now() + $3::interval)
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE postbox_gates.expires_at <= now()
RETURNING holder`

// Run runs pass while holding the gate, and returns a *GateHeldError at
// once when another holder has it. pass's context is cancelled if the
// lease is lost (a renewal that could not run within the lease), so two
// passes never run at once for longer than it takes pass to notice.
func (g Gate) Run(ctx context.Context, pass func(ctx context.Context) error) error {
	h, err := g.Acquire(ctx, time.Time{})
	if err != nil {
		return err
	}
	err = pass(h.Context())
	return errors.Join(err, h.Close())
}

// Acquire takes the gate and keeps it, renewing its lease, until the
// Hold is released. A gate held elsewhere is waited for until until (none
// when until has passed): Acquire looks every GateWaitPoll and takes it as
// soon as its holder releases it or the holder's lease runs out. Still
// held at until, it returns a *GateHeldError.
func (g Gate) Acquire(ctx context.Context, until time.Time) (*Hold, error) {
	holder := g.Owner + "/" + token()
	for {
		ok, err := g.acquire(ctx, holder)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
		if err := g.await(ctx, until); err != nil {
			return nil, err
		}
	}
	h := &Hold{gate: g, holder: holder, renewed: make(chan struct{})}
	h.ctx, h.lost = context.WithCancelCause(ctx)
	var renewCtx context.Context
	renewCtx, h.stopRenewal = context.WithCancel(h.ctx)
	go func() {
		defer close(h.renewed)
		g.renew(renewCtx, holder, h.lost)
	}()
	return h, nil
}

// GateWaitPoll is how often Acquire looks at a held gate it waits for: a
// read of the row, no lock taken. It bounds the gap of a hand-over.
const GateWaitPoll = 100 * time.Millisecond

// await returns once the gate may be free (no row, or its lease run out),
// and a *GateHeldError once until has passed with the gate still held.
func (g Gate) await(ctx context.Context, until time.Time) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wait := min(GateWaitPoll, time.Until(until))
		if wait <= 0 {
			return g.held(ctx)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		qctx, cancel := context.WithTimeout(ctx, gateStatementTimeout)
		var free bool
		err := g.DB.QueryRow(qctx, `SELECT NOT EXISTS (SELECT 1 FROM postbox_gates WHERE name = $1 AND expires_at > now())`, g.Name).Scan(&free)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("gate %s: wait: %w", g.Name, err)
		case free:
			return nil
		}
	}
}

// acquire runs acquireGateSQL for holder: false when another holder's
// lease has not run out.
func (g Gate) acquire(ctx context.Context, holder string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, gateStatementTimeout)
	defer cancel()
	var got string
	err := g.DB.QueryRow(ctx, acquireGateSQL, g.Name, holder, g.Lease).Scan(&got)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("gate %s: acquire: %w", g.Name, err)
	}
	return true, nil
}

// Hold is a gate Acquire took: renewed until Release or Close.
type Hold struct {
	gate        Gate
	holder      string
	ctx         context.Context
	lost        context.CancelCauseFunc
	stopRenewal context.CancelFunc
	renewed     chan struct{}

	releaseOnce sync.Once
	releaseErr  error
}

// Context ends when the lease is lost (see Gate.Run) or ctx ends. Release
// leaves it open, for work the holder started to finish.
func (h *Hold) Context() context.Context { return h.ctx }

// Release stops renewing and deletes the row, so a waiting Acquire takes
// the gate at once. Safe to call more than once, and concurrently.
func (h *Hold) Release() error {
	h.releaseOnce.Do(func() {
		h.stopRenewal()
		<-h.renewed
		g := h.gate
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), gateStatementTimeout)
		defer cancel()
		if _, err := g.DB.Exec(ctx, `DELETE FROM postbox_gates WHERE name = $1 AND holder = $2`, g.Name, h.holder); err != nil {
			// The lease frees it soon enough.
			h.releaseErr = fmt.Errorf("gate %s: release: %w", g.Name, err)
		}
	})
	return h.releaseErr
}

// Close releases the gate, if not yet released, and ends Context.
func (h *Hold) Close() error {
	err := h.Release()
	h.lost(nil)
	return err
}

// Take takes the gate for its lease and keeps it, running nothing and
// releasing nothing: one Take succeeds per Lease across the pool, which
// makes the gate a pool-wide schedule (the sweep's). false with no error
// means another holder's lease has not run out.
func (g Gate) Take(ctx context.Context) (bool, error) {
	return g.acquire(ctx, g.Owner+"/"+token())
}

// gateStatementTimeout bounds each gate statement.
const gateStatementTimeout = 5 * time.Second

// errGateLost is the cause passed to a pass whose lease could not be kept.
var errGateLost = errors.New("gate lease lost")

func (g Gate) renew(ctx context.Context, holder string, lost context.CancelCauseFunc) {
	every := max(g.Lease/3, 10*time.Millisecond)
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	keptUntil := time.Now().Add(g.Lease)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		rctx, cancel := context.WithTimeout(ctx, min(gateStatementTimeout, every))
		tag, err := g.DB.Exec(rctx, `UPDATE postbox_gates SET expires_at = now() + $3::interval
WHERE name = $1 AND holder = $2`, g.Name, holder, g.Lease)
		cancel()
		switch {
		case err == nil && tag.RowsAffected() == 1:
			keptUntil = time.Now().Add(g.Lease)
		case err == nil, time.Now().After(keptUntil.Add(-every)):
			// Taken over, or about to expire without a renewal.
			lost(errGateLost)
			return
		}
	}
}

func (g Gate) held(ctx context.Context) error {
	e := &GateHeldError{Gate: g.Name}
	qctx, cancel := context.WithTimeout(ctx, gateStatementTimeout)
	defer cancel()
	// Best effort: the holder may have released it since.
	_ = g.DB.QueryRow(qctx, `SELECT holder, expires_at FROM postbox_gates WHERE name = $1`, g.Name).Scan(&e.Holder, &e.Until)
	return e
}

func token() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
