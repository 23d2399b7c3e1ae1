package engine_test

import (
	"context"
	"slices"
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
// unit takes at once; alone, a key takes every slot. Acquisitions are
// tried on a context already done: each takes a slot only if it may now.
func TestSlots_CrowdedKeyLeavesTheHeadroom(t *testing.T) {
	t.Parallel()
	now, cancel := context.WithCancel(context.Background())
	cancel()
	tryFor := func(s *engine.Slots, key string) bool { return s.AcquireFor(now, key) }

	alone := engine.NewSlots(16)
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
	s.ReleaseFor("fast") // fast shares the slots for an hour after
	for i := range 15 {
		if !tryFor(s, "slow") {
			t.Fatalf("slow got %d slots beside a key holding none, want 15", i)
		}
	}
	if tryFor(s, "slow") {
		t.Fatal("slow took the last slot, the headroom, while another key shares them")
	}
	if keys, headroom := s.Crowded(); !slices.Equal(keys, []string{"slow"}) || headroom != 1 {
		t.Fatalf("Crowded() = %v, %d; want [slow], 1", keys, headroom)
	}
	if !tryFor(s, "fast") {
		t.Fatal("fast got no slot while slow held its share and one was free")
	}
	// The slot fast holds is the headroom: one slow gives back, slow may
	// take again.
	s.ReleaseFor("slow")
	if !tryFor(s, "slow") {
		t.Fatal("slow could not take back a slot while fast held the headroom's one")
	}
	if keys, room := s.Crowded(); !slices.Equal(keys, []string{"slow"}) || room != 0 {
		t.Fatalf("Crowded() with fast holding a slot = %v, %d; want [slow], 0", keys, room)
	}
	// A slot taken for a claim is a crowded key's only if it leaves the
	// headroom free.
	s.ReleaseFor("fast")
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
