package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
)

// rankedUnit is an Expiring, Ranked unit that runs run.
type rankedUnit struct {
	rank int64
	run  func()
}

func (u rankedUnit) Run(context.Context) engine.Tally           { u.run(); return engine.Tally{Sent: 1} }
func (u rankedUnit) Panicked(context.Context, any) engine.Tally { return engine.Tally{} }
func (u rankedUnit) StartBy() time.Time                         { return time.Now().Add(time.Minute) }
func (u rankedUnit) Release(context.Context) engine.Tally       { return engine.Tally{Released: 1} }
func (u rankedUnit) Rank() (int64, bool)                        { return u.rank, true }

// onceSource returns its units in its first claim, and nothing after.
type onceSource struct {
	mu    sync.Mutex
	units []engine.Unit
}

func (s *onceSource) Claim(context.Context, int) (engine.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := engine.Claim{Units: s.units, Rows: len(s.units)}
	s.units = nil
	return c, nil
}

// A Ranked unit a claim returns beyond its slots waits for one in rank,
// where a running unit sees it as older work waiting (Slots.OlderWaits).
func TestLane_RankedUnitBeyondTheSlotsWaitsInRank(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	slots := engine.NewSlots(1)
	sawOlder := make(chan bool, 1)
	ran := make(chan int64, 2)
	src := &onceSource{units: []engine.Unit{
		rankedUnit{rank: 9, run: func() {
			sawOlder <- eventually.Within(patience, func() bool { return slots.OlderWaits(9) })
			ran <- 9
		}},
		rankedUnit{rank: 2, run: func() { ran <- 2 }},
	}}
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: slots})
	sum, err := lane.Run(ctx, engine.RunOptions{UntilIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	if !<-sawOlder {
		t.Fatal("the unit beyond the claim's slot did not wait in rank")
	}
	if sum.Sent != 2 || <-ran != 9 || <-ran != 2 {
		t.Fatalf("tally %+v", sum)
	}
}
