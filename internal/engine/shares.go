package engine

import (
	"context"
	"time"
)

// Keyed is a Unit whose slot counts against a key's share of the slots:
// a webhook attempt's endpoint. Units of other kinds are nobody's.
type Keyed interface {
	SlotKey() string
}

// ShareRecent is how long after its last slot a key still counts as
// sharing the slots. A receiver that answers in 20 ms holds a slot for 20
// ms at a time and none in between: counted only while it held one, it
// would leave the whole process to a slow key between two of its events,
// and wait behind it for the next.
const ShareRecent = 5 * time.Second

// keyUse is one key's part of the slots: how many it holds, and when it
// last took or gave one back.
type keyUse struct {
	held int
	seen time.Time
}

// Slot shares. While several keys share the slots (each held one within
// ShareRecent), a key is crowded once it holds its fair share of them,
// Cap divided among the keys sharing. A crowded key may still take a free
// slot, so that a slow endpoint alone, or beside endpoints that need
// little, uses what the others leave — but never one of the last few
// (headroom): those are for the keys below their share, the slots they
// hold counting towards them. So a key whose receiver answers in 2 s fills
// the process up to the headroom, and an event for any other endpoint
// starts on a free slot at once, rather than when one of the slow key's
// requests ends. With one key, nothing is kept back: it may use every
// slot.

// headroom is how many slots a crowded key leaves free: a sixteenth of
// the slots, at least one, none below four slots (where one is a quarter
// of the process). A key alone is never crowded: its share is every slot.
func (s *Slots) headroom() int {
	if s.cap < 4 {
		return 0
	}
	return max(s.cap/16, 1)
}

// room is how many slots a crowded key must leave free: the headroom,
// less the slots the keys below their share hold already. The headroom is
// theirs, free or in use: counting only the free slots, a slow key would
// leave the others the headroom and the slots they hold besides. s.mu is
// held.
func (s *Slots) room(sharing int) int {
	room := s.headroom()
	for _, u := range s.keys {
		if u.held*sharing < s.cap {
			room -= u.held
		}
	}
	return max(room, 0)
}

// SetRecent sets how long after its last slot a key still shares the
// slots, in place of ShareRecent: tests that must not depend on the
// machine's speed set it long.
func (s *Slots) SetRecent(d time.Duration) {
	s.mu.Lock()
	s.recent = d
	s.mu.Unlock()
}

// sharing counts the keys sharing the slots at now, and forgets the keys
// that no longer do. s.mu is held.
func (s *Slots) sharing(now time.Time) int {
	recent := s.recent
	if recent <= 0 {
		recent = ShareRecent
	}
	n := 0
	for k, u := range s.keys {
		if u.held > 0 || now.Sub(u.seen) < recent {
			n++
		} else {
			delete(s.keys, k)
		}
	}
	return n
}

// crowded reports whether key holds its share of the slots while sharing
// keys share them. s.mu is held.
func (s *Slots) crowded(key string, sharing int) bool {
	u := s.keys[key]
	return sharing > 1 && u != nil && u.held*sharing >= s.cap
}

// Crowded is the keys that hold their share of the slots now, and the
// free slots they leave (room): a claim for n slots takes at most n minus
// that many of their rows (none when n is no more), so the last free
// slots stay for the other keys' rows.
func (s *Slots) Crowded() (keys []string, headroom int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.sharing(time.Now())
	return s.crowdedKeys(n, false), s.room(n)
}

// Shared reports whether a key is crowded now: a Lane then claims for
// any free slot, not for its Refill. The slots a crowded key leaves are
// the headroom, fewer than a Refill may be: waiting for more, a claim
// would wait for the slow key's requests to end, the others' rows with it.
func (s *Slots) Shared() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.crowdedKeys(s.sharing(time.Now()), true)) > 0
}

// crowdedKeys is the keys crowded among sharing keys, only the first if
// first says so. s.mu is held.
func (s *Slots) crowdedKeys(sharing int, first bool) (keys []string) {
	for k := range s.keys {
		if s.crowded(k, sharing) {
			if keys = append(keys, k); first {
				break
			}
		}
	}
	return keys
}

// AcquireFor waits for one slot for a unit of key, which it takes when a
// slot is free and key is not crowded, or, crowded, when more than the
// headroom is free. It reports whether it took one: false when ctx ended
// first. The slot is key's (take); Release gives it back with ReleaseFor.
func (s *Slots) AcquireFor(ctx context.Context, key string) bool {
	return s.await(ctx, func() bool {
		n := s.sharing(time.Now())
		free := s.cap - s.used - len(s.ranks)
		if free == 0 || s.crowded(key, n) && free <= s.room(n) {
			return false
		}
		s.used++
		s.peak = max(s.peak, s.used)
		s.take(key)
		return true
	})
}

// Take counts a slot already taken (by AcquireRanked) as key's.
func (s *Slots) Take(key string) {
	s.mu.Lock()
	s.take(key)
	s.mu.Unlock()
}

// Assign makes a slot taken for a claim (Acquire) key's, if key may have
// it as AcquireFor would give it: the slot is the last of the headroom
// it would take otherwise. If not, the slot is given back and Assign
// reports false; the unit waits for one (AcquireFor).
func (s *Slots) Assign(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.sharing(time.Now())
	if !s.crowded(key, n) || s.cap-s.used-len(s.ranks) >= s.room(n) {
		s.take(key)
		return true
	}
	s.release(1)
	return false
}

func (s *Slots) take(key string) {
	u := s.keys[key]
	if u == nil {
		u = &keyUse{}
		s.keys[key] = u
	}
	u.held++
	u.seen = time.Now()
}

// ReleaseFor gives back one slot of key's.
func (s *Slots) ReleaseFor(key string) {
	s.mu.Lock()
	if u := s.keys[key]; u != nil && u.held > 0 {
		u.held--
		u.seen = time.Now()
	}
	s.release(1)
	s.mu.Unlock()
}

// HeldBy is how many slots key holds now: for metrics and tests.
func (s *Slots) HeldBy(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.keys[key]; u != nil {
		return u.held
	}
	return 0
}

// Freed is closed when a slot is next given back: a Lane whose keys are
// crowded waits on it to claim again.
func (s *Slots) Freed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed
}
