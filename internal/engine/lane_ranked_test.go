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

// keyedUnit is a unit of key whose Run waits for release.
type keyedUnit struct {
	key     string
	ran     chan<- string
	release <-chan struct{}
}

func (u keyedUnit) Run(context.Context) engine.Tally {
	u.ran <- u.key
	<-u.release
	return engine.Tally{Sent: 1}
}
func (u keyedUnit) Panicked(context.Context, any) engine.Tally { return engine.Tally{} }
func (u keyedUnit) StartBy() time.Time                         { return time.Now().Add(time.Hour) }
func (u keyedUnit) Release(context.Context) engine.Tally       { return engine.Tally{Released: 1} }
func (u keyedUnit) SlotKey() string                            { return u.key }

// floodSource's first claim is a full one of a slow key's units, for
// every slot it is given; its next, one unit of another key.
type floodSource struct {
	mu      sync.Mutex
	claims  int
	ran     chan<- string
	release <-chan struct{}
}

func (s *floodSource) Claim(_ context.Context, n int) (engine.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	switch s.claims {
	case 1:
		units := make([]engine.Unit, n)
		for i := range units {
			units[i] = keyedUnit{key: "slow", ran: s.ran, release: s.release}
		}
		return engine.Claim{Units: units, Rows: n, Full: true}, nil
	case 2:
		return engine.Claim{Units: []engine.Unit{keyedUnit{key: "fast", ran: s.ran, release: s.release}}, Rows: 1}, nil
	}
	return engine.Claim{}, nil
}

// After a full claim of a slow key's units, which hold every slot but the
// headroom, the Lane claims again for the one free slot, not for its
// Refill: fewer slots than a Refill are all the slow key leaves, and
// waiting for more would wait for its requests to end.
func TestLane_CrowdedSlotsClaimForAnyFreeSlot(t *testing.T) {
	t.Parallel()
	slots := engine.NewSlots(16) // a headroom of one, a Refill of two
	slots.SetRecent(time.Hour)
	if !slots.AcquireFor(context.Background(), "fast") {
		t.Fatal("no slot for fast")
	}
	slots.ReleaseFor("fast", 0) // fast shares the slots from now on
	ran, release := make(chan string, 32), make(chan struct{})
	defer close(release)
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: &floodSource{ran: ran, release: release}, Slots: slots, Poll: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = lane.Run(ctx, engine.RunOptions{}) }()
	var mu sync.Mutex
	count := map[string]int{}
	go func() {
		for key := range ran {
			mu.Lock()
			count[key]++
			mu.Unlock()
		}
	}()
	ranSoFar := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return count[key]
	}
	eventually.Until(t, "fast's unit run while slow's hold their slots", patience, func() bool { return ranSoFar("fast") == 1 })
	eventually.Until(t, "slow's units in every slot but the headroom", patience, func() bool { return ranSoFar("slow") == 15 })
	if held := slots.HeldBy("slow"); held != 15 {
		t.Fatalf("slow holds %d slots beside fast, want 15", held)
	}
}

// A drain whose claim found nothing more still starts the units it
// claimed beyond its slots, as the slots free: they are due and leased to
// it. Given back when its claims end, they would wait for another pass
// (a webhook fan-out's first attempts made out of process).
func TestLane_DrainStartsEveryUnitItClaimed(t *testing.T) {
	t.Parallel()
	ran, release := make(chan string, 3), make(chan struct{})
	src := &onceSource{units: []engine.Unit{keyedUnit{"a", ran, release}, keyedUnit{"b", ran, release}, keyedUnit{"c", ran, release}}}
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(1), Poll: time.Hour})
	sum, err := lane.Run(context.Background(), engine.RunOptions{UntilIdle: true, ClaimsDone: func() { close(release) }})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 3 || sum.Released != 0 {
		t.Fatalf("tally %+v, want all 3 sent, none released", sum)
	}
}
