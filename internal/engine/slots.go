package engine

import (
	"context"
	"sync"
)

// Slots is a per-process cap on work in flight: EMAIL_CONCURRENCY SMTP
// batches (each on its own connection) or WEBHOOK_CONCURRENCY HTTP
// attempts. Every Lane, drain and replay of a transport in one process
// takes its slots here, so the cap holds however many run at once.
type Slots struct {
	mu    sync.Mutex
	cap   int
	used  int
	peak  int
	freed chan struct{} // closed and replaced whenever slots are released
}

// NewSlots returns n slots (at least one).
func NewSlots(n int) *Slots {
	return &Slots{cap: max(n, 1), freed: make(chan struct{})}
}

// Cap is the number of slots.
func (s *Slots) Cap() int { return s.cap }

// InUse is the number of slots taken now.
func (s *Slots) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// Peak is the most slots ever taken at once: what tests read to prove the
// cap.
func (s *Slots) Peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// Acquire waits until at least least slots are free (clamped to 1..Cap),
// then takes as many free ones as it may, up to most. It returns how many
// it took: 0 when ctx ended first.
func (s *Slots) Acquire(ctx context.Context, least, most int) int {
	least = min(max(least, 1), s.cap)
	most = max(most, least)
	for {
		s.mu.Lock()
		if free := s.cap - s.used; free >= least {
			n := min(free, most)
			s.used += n
			s.peak = max(s.peak, s.used)
			s.mu.Unlock()
			return n
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return 0
		}
	}
}

// Release gives n slots back.
func (s *Slots) Release(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.used -= n
	if s.used < 0 {
		s.mu.Unlock()
		panic("engine: Slots released more than acquired")
	}
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}
