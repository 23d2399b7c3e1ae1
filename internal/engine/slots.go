package engine

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Slots is a per-process cap on work in flight: EMAIL_CONCURRENCY SMTP
// batches (each on its own connection) or WEBHOOK_CONCURRENCY HTTP
// attempts. Every Lane, drain and replay of a transport in one process
// takes its slots here, so the cap holds however many run at once.
//
// Work that has an age — an ordered delivery, ranked by its place in its
// key — may wait for a slot in order of rank (AcquireRanked), and a unit
// that holds a slot and has more of the same to do can ask whether older
// work waits (OlderWaits) and leave its slot to it: a hot key keeps its
// slot while nothing older waits, and many keys on fewer slots take
// turns, oldest first.
type Slots struct {
	mu     sync.Mutex
	cap    int
	used   int
	peak   int
	freed  chan struct{}      // closed and replaced whenever slots are released
	looser chan struct{}      // closed and replaced when a release may let a claim take more (Loosened)
	ranks  []int64            // the ranks of the goroutines in AcquireRanked
	keys   map[string]*keyUse // the keys sharing the slots (shares.go)
	active map[string]*keyUse // the keys holding or waiting for a slot (note)
	// pruneAt is when sharing next forgets the keys that stopped sharing.
	pruneAt time.Time
	recent  time.Duration    // SetRecent's; zero: ShareRecent
	now     func() time.Time // SetClock's; nil: time.Now

	paceTimer *time.Timer // wakes the waiters when a paced key's next start is due (wakeAt)
	paceAt    time.Time
}

// NewSlots returns n slots (at least one).
func NewSlots(n int) *Slots {
	return &Slots{cap: max(n, 1), freed: make(chan struct{}), looser: make(chan struct{}), keys: map[string]*keyUse{}}
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
// it took: 0 when ctx ended first. Slots freed while ranked waiters wait
// are theirs first: work already claimed goes before a claim of more.
func (s *Slots) Acquire(ctx context.Context, least, most int) int {
	least = min(max(least, 1), s.cap)
	most = max(most, least)
	n := 0
	s.await(ctx, func() bool {
		if free := s.cap - s.used - len(s.ranks); free >= least {
			n = min(free, most)
			s.used += n
			s.peak = max(s.peak, s.used)
		}
		return n > 0
	})
	return n
}

// await runs take with s.mu held until it reports that it took slots,
// waiting for slots to be given back between tries. It reports false
// when ctx ended first.
func (s *Slots) await(ctx context.Context, take func() bool) bool {
	for {
		s.mu.Lock()
		if take() {
			s.mu.Unlock()
			return true
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
	}
}

// Release gives n slots back.
func (s *Slots) Release(n int) { s.giveBack(n, true) }

// Return gives back n slots a claim took and did not fill. They were free
// before it, so a Lane waiting on Loosened sleeps on: waking it, two
// Lanes whose claims find only crowded keys' rows would wake each other
// in turn, claiming nothing, as fast as the database answers.
func (s *Slots) Return(n int) { s.giveBack(n, false) }

func (s *Slots) giveBack(n int, loosen bool) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.give(n)
	if loosen {
		s.loosen()
	}
}

func (s *Slots) release(n int) {
	s.give(n)
	s.loosen()
}

// give gives n slots back and wakes the waiters for one; s.mu is held.
func (s *Slots) give(n int) {
	s.used -= n
	if s.used < 0 {
		s.mu.Unlock()
		panic("engine: Slots released more than acquired")
	}
	s.wake()
}

// loosen tells a Lane waiting on Loosened that a claim may take more now.
func (s *Slots) loosen() {
	close(s.looser)
	s.looser = make(chan struct{})
}

// wake tells every waiter that something changed.
func (s *Slots) wake() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// AcquireRanked waits for one slot, which it takes only while no ranked
// waiter of a lower rank waits too. It reports whether it took one: false
// when ctx ended first. Acquire's waiters are not ranked: they take a
// free slot whenever they find one.
func (s *Slots) AcquireRanked(ctx context.Context, rank int64) bool {
	s.mu.Lock()
	s.ranks = append(s.ranks, rank)
	for {
		if s.used < s.cap && s.lowest() == rank {
			s.leave(rank)
			s.used++
			s.peak = max(s.peak, s.used)
			if s.used < s.cap && len(s.ranks) > 0 {
				s.wake() // the next in rank may take another free slot
			}
			s.mu.Unlock()
			return true
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			s.leave(rank)
			s.wake() // the next in rank may now be the lowest
			s.mu.Unlock()
			return false
		}
	}
}

// OlderWaits reports whether a ranked waiter older (lower) than rank
// waits for a slot: a unit that holds a slot and has work of rank rank to
// go on with leaves it to that waiter instead.
func (s *Slots) OlderWaits(rank int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ranks) > 0 && s.lowest() < rank
}

// lowest is the lowest rank waiting; s.ranks is not empty.
func (s *Slots) lowest() int64 {
	return slices.Min(s.ranks)
}

// leave takes one waiter of rank rank out of s.ranks.
func (s *Slots) leave(rank int64) {
	i := slices.Index(s.ranks, rank)
	s.ranks = slices.Delete(s.ranks, i, i+1)
}
