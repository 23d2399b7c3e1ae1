package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
)

// sweptSource claims nothing and counts its sweeps, and the claims made
// before the first sweep.
type sweptSource struct {
	sweeps, claimsBeforeSweep atomic.Int32
}

func (s *sweptSource) Claim(context.Context, int) (engine.Claim, error) {
	if s.sweeps.Load() == 0 {
		s.claimsBeforeSweep.Add(1)
	}
	return engine.Claim{}, nil
}

func (s *sweptSource) Sweep(context.Context) (int, []string, error) {
	s.sweeps.Add(1)
	return 0, nil, nil
}

// A Lane sweeps a Sweeper when a Run starts and every SweepEvery while it
// runs.
func TestLane_SweepsAtStartAndEveryInterval(t *testing.T) {
	t.Parallel()
	src := &sweptSource{}
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(1), SweepEvery: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = lane.Run(ctx, engine.RunOptions{})
	}()
	eventually.Until(t, "three sweeps at a 10 ms interval", patience, func() bool { return src.sweeps.Load() >= 3 })
	cancel()
	<-done
}

// A drain sweeps once, before its first claim, so it takes the rows the
// sweep moved into the window, and returns when idle.
func TestLane_DrainSweepsFirst(t *testing.T) {
	t.Parallel()
	src := &sweptSource{}
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(1)})
	if _, err := lane.Run(context.Background(), engine.RunOptions{UntilIdle: true}); err != nil {
		t.Fatal(err)
	}
	if src.sweeps.Load() != 1 || src.claimsBeforeSweep.Load() != 0 {
		t.Fatalf("%d sweeps, %d claims before the first; want one sweep, first", src.sweeps.Load(), src.claimsBeforeSweep.Load())
	}
}

// scheduledSource is a laneSource that is Scheduled: a Lane asks NextDue
// only when it is cold, so each call is the event of the lane having gone
// cold. Nothing is pending (zero): the lane then waits for its Poll.
type scheduledSource struct {
	laneSource
	asked atomic.Int32
}

func (s *scheduledSource) NextDue(context.Context) time.Duration {
	s.asked.Add(1)
	return 0
}

// A Run starts cold: its first claim is at once, and when it finds
// nothing the lane goes cold — it asks when the next row is due and waits
// for that, a wake-up or the Poll, not the hot poll. A shift or retry pass
// that began hot would claim again at HotPoll on every start, on an idle
// replica. A wake-up claims, once more at HotPoll, and leaves it cold.
func TestLane_StartsCold(t *testing.T) {
	t.Parallel()
	src := &scheduledSource{}
	wake := make(chan struct{}, 1)
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(1), Wake: wake,
		Poll: never, HotPoll: time.Millisecond})
	stop := runLane(t, lane)
	eventually.Until(t, "the lane asks when the next row is due, as a cold lane does", patience, func() bool { return src.asked.Load() >= 1 })
	if n := len(src.claims()); n != 1 {
		t.Fatalf("%d claims before the lane went cold, with Poll an hour; want 1: the run started hot", n)
	}
	wake <- struct{}{}
	src.waitClaims(t, 3) // the wake-up's claim, then one at HotPoll
	eventually.Until(t, "the lane cold again after the wake-up's claims", patience, func() bool { return src.asked.Load() >= 2 })
	if n := len(src.claims()); n != 3 {
		t.Errorf("%d claims in all, want 3: the first, the wake-up's, one at HotPoll", n)
	}
	stop()
}
