package engine_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
)

// However many goroutines take slots at once, no more than Cap are held.
func TestSlots_NeverMoreThanCap(t *testing.T) {
	t.Parallel()
	s := engine.NewSlots(3)
	var held, peak atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 50 {
				n := s.Acquire(context.Background(), 1, 2)
				h := held.Add(int32(n))
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				time.Sleep(100 * time.Microsecond) // simulates: work holding its slots a moment
				held.Add(-int32(n))
				s.Release(n)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 3 || s.Peak() > 3 {
		t.Fatalf("peak %d held (Peak() %d), want at most 3", p, s.Peak())
	}
	if s.InUse() != 0 {
		t.Fatalf("%d slots still in use", s.InUse())
	}
}

// Acquire waits for at least least free slots, and gives up when ctx ends.
func TestSlots_AcquireWaitsForLeast(t *testing.T) {
	t.Parallel()
	s := engine.NewSlots(4)
	if n := s.Acquire(context.Background(), 3, 3); n != 3 {
		t.Fatalf("Acquire(3, 3) = %d", n)
	}
	got := make(chan int)
	go func() { got <- s.Acquire(context.Background(), 2, 4) }()
	select {
	case n := <-got:
		t.Fatalf("Acquire(2) returned %d with one slot free", n)
	case <-time.After(20 * time.Millisecond):
	}
	s.Release(1)
	if n := <-got; n != 2 {
		t.Fatalf("Acquire(2, 4) = %d with two free, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if n := s.Acquire(ctx, 1, 1); n != 0 {
		t.Fatalf("Acquire on a full set = %d after ctx ended, want 0", n)
	}
}

// Ranked waiters take freed slots oldest (lowest rank) first, whatever
// order they came in; OlderWaits sees them.
func TestSlots_RankedWaitersGoOldestFirst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := engine.NewSlots(1)
	if s.Acquire(ctx, 1, 1) != 1 {
		t.Fatal("no slot")
	}
	if s.OlderWaits(0) {
		t.Fatal("OlderWaits with no waiter")
	}
	var (
		mu    sync.Mutex
		order []int64
		wg    sync.WaitGroup
	)
	for _, rank := range []int64{5, 3, 9} {
		wg.Go(func() {
			if !s.AcquireRanked(ctx, rank) {
				t.Errorf("rank %d got no slot", rank)
				return
			}
			mu.Lock()
			order = append(order, rank)
			mu.Unlock()
			s.Release(1)
		})
		// Each waits before the next comes, so arrival order is 5, 3, 9.
		eventually.Until(t, "a ranked waiter seen by OlderWaits", patience, func() bool { return s.OlderWaits(rank + 1) })
	}
	if !s.OlderWaits(4) || s.OlderWaits(3) {
		t.Fatal("OlderWaits does not see the waiting rank 3 as the oldest")
	}
	s.Release(1)
	wg.Wait()
	if want := []int64{3, 5, 9}; !slices.Equal(order, want) {
		t.Fatalf("slots went to ranks %v, want %v", order, want)
	}
}

// A ranked waiter whose context ends leaves the queue: the next in rank
// takes the slot.
func TestSlots_RankedWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := engine.NewSlots(1)
	s.Acquire(ctx, 1, 1)
	early, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan bool)
	go func() { gaveUp <- s.AcquireRanked(early, 1) }()
	eventually.Until(t, "a ranked waiter seen by OlderWaits", patience, func() bool { return s.OlderWaits(2) })
	got := make(chan bool)
	go func() { got <- s.AcquireRanked(ctx, 2) }()
	eventually.Until(t, "a ranked waiter seen by OlderWaits", patience, func() bool { return s.OlderWaits(3) })
	giveUp()
	if <-gaveUp {
		t.Fatal("a waiter whose context ended took a slot")
	}
	s.Release(1)
	if !<-got {
		t.Fatal("the next in rank got no slot once the older waiter left")
	}
	if s.OlderWaits(100) || s.InUse() != 1 {
		t.Fatalf("after: OlderWaits %v, in use %d", s.OlderWaits(100), s.InUse())
	}
}

// A slot freed while a ranked waiter waits is the waiter's: a plain
// Acquire (a lane about to claim more work) does not take it first.
func TestSlots_FreedSlotGoesToARankedWaiterBeforeAPlainAcquire(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := engine.NewSlots(1)
	s.Acquire(ctx, 1, 1)
	got := make(chan bool)
	go func() { got <- s.AcquireRanked(ctx, 7) }()
	eventually.Until(t, "a ranked waiter seen by OlderWaits", patience, func() bool { return s.OlderWaits(8) })
	done, stop := context.WithCancel(ctx)
	stop()
	s.Release(1)
	if n := s.Acquire(done, 1, 1); n != 0 {
		t.Fatalf("a plain Acquire took %d slot(s) a ranked waiter was waiting for", n)
	}
	if !<-got {
		t.Fatal("the ranked waiter got no slot")
	}
}

// A key that holds its share of the slots while another shares them may
// take a free slot but not the last (the headroom), which another key's
// unit takes at once; alone, a key takes every slot once answered.
// Acquisitions are tried on a context already done: each takes a slot
// only if it may now.
func TestSlots_CrowdedKeyLeavesTheHeadroom(t *testing.T) {
	t.Parallel()
	now, cancel := context.WithCancel(context.Background())
	cancel()
	tryFor := func(s *engine.Slots, key string) bool { return s.AcquireFor(now, key) }

	alone := engine.NewSlots(16)
	if !tryFor(alone, "slow") {
		t.Fatal("a key alone got no slot of 16 free")
	}
	alone.ReleaseFor("slow", 0)
	for i := range 16 {
		if !tryFor(alone, "slow") {
			t.Fatalf("a key alone got %d of 16 slots", i)
		}
	}

	s := engine.NewSlots(16) // a headroom of one
	s.SetRecent(time.Hour)
	if !tryFor(s, "fast") {
		t.Fatal("fast got no slot of 16 free")
	}
	s.ReleaseFor("fast", 0) // fast shares the slots for an hour after
	if !tryFor(s, "slow") {
		t.Fatal("slow got no slot of 16 free")
	}
	s.ReleaseFor("slow", 0) // answered: what holds it back is its share
	for i := range 15 {
		if !tryFor(s, "slow") {
			t.Fatalf("slow got %d slots beside a key holding none, want 15", i)
		}
	}
	if tryFor(s, "slow") {
		t.Fatal("slow took the last slot, the headroom, while another key shares them")
	}
	if most := s.Crowded(1); !maps.Equal(most, map[string]int{"slow": 0}) {
		t.Fatalf("Crowded(1) = %v; want slow 0: one slot is the headroom", most)
	}
	if most := s.Crowded(4); !maps.Equal(most, map[string]int{"slow": 3}) {
		t.Fatalf("Crowded(4) = %v; want slow 3: all but the headroom", most)
	}
	if !tryFor(s, "fast") {
		t.Fatal("fast got no slot while slow held its share and one was free")
	}
	// The slot fast holds is the headroom: one slow gives back, slow may
	// take again.
	s.ReleaseFor("slow", 0)
	if !tryFor(s, "slow") {
		t.Fatal("slow could not take back a slot while fast held the headroom's one")
	}
	if most := s.Crowded(1); len(most) != 0 {
		t.Fatalf("Crowded(1) with fast holding the headroom's slot = %v, want none", most)
	}
	// A slot taken for a claim is a crowded key's only if it leaves the
	// headroom free.
	s.ReleaseFor("fast", 0)
	if n := s.Acquire(now, 1, 1); n != 1 {
		t.Fatalf("a claim got %d slots with one free", n)
	}
	if s.Assign("slow") {
		t.Fatal("a claim's last slot went to slow")
	}
	if s.InUse() != 15 {
		t.Fatalf("%d slots in use after the refused assignment, want slow's 15", s.InUse())
	}
	if n := s.Acquire(now, 1, 1); n != 1 || !s.Assign("fast") {
		t.Fatal("a claim's last slot did not go to fast")
	}
}

// A key not answered yet leaves the headroom even alone, so that its
// first requests, all started together, do not take every slot and keep
// a key that comes later waiting for their end; answered, it may take the
// rest.
func TestSlots_UnansweredKeyLeavesTheHeadroom(t *testing.T) {
	t.Parallel()
	now, cancel := context.WithCancel(context.Background())
	cancel()
	s := engine.NewSlots(16) // a headroom of one
	for i := range 15 {
		if !s.AcquireFor(now, "slow") {
			t.Fatalf("a key alone got %d of 16 slots, want 15 before its first answer", i)
		}
	}
	if s.AcquireFor(now, "slow") {
		t.Fatal("a key not answered yet took the last slot, the headroom")
	}
	if most := s.Crowded(1); !maps.Equal(most, map[string]int{"slow": 0}) {
		t.Fatalf("Crowded(1) = %v; want slow 0", most)
	}
	if !s.AcquireFor(now, "fast") {
		t.Fatal("another key got no slot beside the unanswered key")
	}

	alone := engine.NewSlots(16)
	for range 15 {
		alone.AcquireFor(now, "slow")
	}
	alone.ReleaseFor("slow", 0)
	for i := range 2 {
		if !alone.AcquireFor(now, "slow") {
			t.Fatalf("an answered key alone took %d more of 2 free slots, want 2", i)
		}
	}
}

// A key whose requests take PaceAbove or more starts them its answer time
// divided by the slots apart, so they end as far apart; its claims take
// no more of its rows than it could hold, less its units waiting already,
// and waiters are woken when its next start is due. The Slots' clock is
// stepped, not waited on.
func TestSlots_SlowKeyStartsAtItsPace(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var clock atomic.Int64 // the Slots' time, in Unix nanoseconds
	clock.Store(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC).UnixNano())
	s := engine.NewSlots(16)
	s.SetClock(func() time.Time { return time.Unix(0, clock.Load()) })
	if !s.AcquireFor(done, "slow") {
		t.Fatal("no slot for slow")
	}
	s.ReleaseFor("slow", 1600*time.Millisecond) // answers in 1.6 s: a start every 100 ms
	if !s.AcquireFor(done, "slow") {
		t.Fatal("slow's first start after its answer was refused")
	}
	if s.AcquireFor(done, "slow") {
		t.Fatal("slow started a second request at once; want 100 ms later")
	}
	if !s.AcquireFor(done, "fast") {
		t.Fatal("another key got no slot while slow waited for its pace")
	}
	if most := s.Crowded(32); !maps.Equal(most, map[string]int{"slow": 16 + 2 - 1}) {
		t.Fatalf("Crowded(32) = %v; want slow 17: the slots it does not hold and two ahead", most)
	}
	loosened := s.Loosened()
	s.ReleaseFor("fast", 0)
	select {
	case <-loosened:
	default:
		t.Fatal("a slot fast gave back did not wake a Lane waiting to claim")
	}
	waited := make(chan bool)
	go func() { waited <- s.AcquireFor(context.Background(), "slow") }()
	eventually.Until(t, "slow's unit refused and waiting", patience, func() bool { return s.Crowded(32)["slow"] == 16+2-2 })
	// The wake-up set for slow's next start, 100 ms on the real clock,
	// finds the pace's time come.
	clock.Add(int64(100 * time.Millisecond))
	select {
	case ok := <-waited:
		if !ok {
			t.Fatal("slow's waiting unit got no slot when its start came due")
		}
	case <-time.After(patience):
		t.Fatal("nothing woke slow's waiting unit when its start came due")
	}
	loosened = s.Loosened()
	s.ReleaseFor("slow", 1600*time.Millisecond)
	select {
	case <-loosened:
	default:
		t.Fatal("a slot of slow's, with none of its units waiting, did not wake a Lane waiting to claim")
	}
	waiting := make(chan bool)
	go func() { waiting <- s.AcquireFor(context.Background(), "slow") }()
	eventually.Until(t, "slow's next waiting unit counted", patience, func() bool { return s.Crowded(32)["slow"] == 16+2-1-1 })
	loosened = s.Loosened()
	s.ReleaseFor("slow", 1600*time.Millisecond)
	select {
	case <-loosened:
		t.Fatal("a slot slow's own waiting unit will take woke a Lane to claim")
	default:
	}
	clock.Add(int64(100 * time.Millisecond))
	if !<-waiting {
		t.Fatal("slow's second waiting unit got no slot")
	}
	if held := s.HeldBy("slow"); held != 1 {
		t.Fatalf("slow holds %d slots, want 1", held)
	}
}

// A unit with a lease waits for its key's pace only through the first half
// of it: past that it takes a free slot, paced or not, rather than be
// given back unsent at its lease's end with its attempt counted. The
// Slots' clock stands still, so only the lease lets it through.
func TestSlots_PaceGivesWayHalfwayThroughTheLease(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	s := engine.NewSlots(16)
	s.SetClock(func() time.Time { return clock })
	if !s.AcquireFor(context.Background(), "slow") {
		t.Fatal("no slot for slow")
	}
	s.ReleaseFor("slow", 1600*time.Millisecond)
	if !s.AcquireFor(context.Background(), "slow") {
		t.Fatal("slow's first start after its answer was refused")
	}
	lease, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if !s.AcquireFor(lease, "slow") {
		t.Fatal("a unit waited out its whole lease for its key's pace")
	}
}

// Slots a claim took and gave back unfilled wake a unit waiting for one,
// but not a Lane waiting to claim again (Loosened): two Lanes whose claims
// find only crowded keys' rows would otherwise wake each other in turn.
// A slot released after work wakes both.
func TestSlots_ReturnedSlotsWakeNoLane(t *testing.T) {
	t.Parallel()
	s := engine.NewSlots(4)
	loosened, freed := s.Loosened(), make(chan int)
	if n := s.Acquire(context.Background(), 4, 4); n != 4 {
		t.Fatalf("took %d of 4 free slots", n)
	}
	go func() { freed <- s.Acquire(context.Background(), 1, 1) }()
	s.Return(1)
	if n := <-freed; n != 1 {
		t.Fatalf("a waiter took %d slots when one was returned, want 1", n)
	}
	select {
	case <-loosened:
		t.Fatal("a slot returned unfilled woke a Lane waiting to claim")
	default:
	}
	s.Release(1)
	select {
	case <-loosened:
	default:
		t.Fatal("a slot released after work did not wake a Lane waiting to claim")
	}
}

// A keyed slot costs the same however many keys share the slots: the
// walks are over the keys holding or waiting for one (fewer than the
// slots and the units waiting), and the keys gone quiet are forgotten an
// eighth of ShareRecent at a time.
//
//	go test -run '^$' -bench Slots_KeyedAcquire ./internal/engine/
func BenchmarkSlots_KeyedAcquire(b *testing.B) {
	for _, keys := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := engine.NewSlots(32)
			s.SetRecent(time.Hour)
			ctx := context.Background()
			names := make([]string, keys)
			for i := range names {
				names[i] = "endpoint-" + strconv.Itoa(i)
				s.AcquireFor(ctx, names[i])
				s.ReleaseFor(names[i], time.Millisecond)
			}
			b.ResetTimer()
			for i := range b.N {
				key := names[i%keys]
				s.AcquireFor(ctx, key)
				s.ReleaseFor(key, time.Millisecond)
			}
		})
	}
}
