package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
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
				time.Sleep(100 * time.Microsecond)
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
