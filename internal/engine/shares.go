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

// PaceAbove is the answer time from which a key's starts are paced
// (paced): a key whose requests end sooner gives its slots back within it
// anyway, whenever it took them.
const PaceAbove = 250 * time.Millisecond

// keyUse is one key's part of the slots: how many it holds, when it last
// took or gave one back, how long it holds one (answer, a moving average;
// answered: measured at least once), when its next start is due if it is
// paced, and how many of its units wait for a slot (AcquireFor).
type keyUse struct {
	held     int
	seen     time.Time
	answer   time.Duration
	answered bool
	next     time.Time
	waiting  int
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
//
// Two more rules keep a slow key's requests from ending all at once, which
// would leave a key that comes later waiting for a whole answer time:
//
//   - A key that has not been answered yet (its answer time unknown) leaves
//     the headroom, even alone: the first events of a flood to an endpoint
//     that answers in 2 s would otherwise take every slot together and end
//     together 2 s later.
//   - A key whose answer time is PaceAbove or more starts its requests one
//     at a time, its answer time divided by the slots apart (paced): so
//     they end as far apart, and a slot comes back every so often however
//     many the key holds. That is the rate its slots reach anyway (every
//     slot busy for one answer time each), so the pace costs it nothing
//     once it runs.

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
	for _, u := range s.active {
		if !s.heldBack(u, sharing) {
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
	s.recent, s.pruneAt = d, time.Time{}
	s.mu.Unlock()
}

// sharing counts the keys sharing the slots at now. The keys that no
// longer do are forgotten an eighth of recent at a time, a walk of every
// key not on every slot: so a key stops sharing up to that much after
// recent has passed. s.mu is held.
func (s *Slots) sharing(now time.Time) int {
	if !now.Before(s.pruneAt) {
		s.prune(now)
	}
	return len(s.keys)
}

// prune forgets the keys that have not held a slot within recent.
func (s *Slots) prune(now time.Time) {
	recent := s.recent
	if recent <= 0 {
		recent = ShareRecent
	}
	for k, u := range s.keys {
		if u.held == 0 && u.waiting == 0 && now.Sub(u.seen) >= recent {
			delete(s.keys, k)
		}
	}
	s.pruneAt = now.Add(recent / 8)
}

// note keeps s.active, the keys holding a slot or waiting for one, in
// step with u's counts: fewer than the slots and the units waiting,
// however many keys share them, and what room, Crowded and Shared walk.
// s.mu is held.
func (s *Slots) note(key string, u *keyUse) {
	if u.held > 0 || u.waiting > 0 {
		if s.active == nil {
			s.active = map[string]*keyUse{}
		}
		s.active[key] = u
		return
	}
	delete(s.active, key)
}

// crowded reports whether key holds its share of the slots while sharing
// keys share them, or, not answered yet, holds all but the headroom: it
// leaves the room. s.mu is held.
func (s *Slots) crowded(key string, sharing int) bool {
	u := s.keys[key]
	return u != nil && s.heldBack(u, sharing)
}

func (s *Slots) heldBack(u *keyUse, sharing int) bool {
	return sharing > 1 && u.held*sharing >= s.cap ||
		!u.answered && u.held > 0 && u.held >= s.cap-s.headroom()
}

// ahead is how many of a paced key's units beyond its slots a claim may
// leave waiting: an eighth of the slots, as a Lane's claim reaches ahead.
func (s *Slots) ahead() int { return max(s.cap/8, 1) }

// pacing reports whether u's starts are paced: it answers in PaceAbove or
// more, and the slots are enough to keep a headroom (below four, a key
// holding one more has most of them anyway). s.mu is held.
func (s *Slots) pacing(u *keyUse) bool {
	return u.answer >= PaceAbove && s.headroom() > 0
}

// pace is how far apart a paced key's starts are: its answer time divided
// by the slots.
func (s *Slots) pace(u *keyUse) time.Duration {
	return u.answer / time.Duration(s.cap)
}

// paced reports whether u's next start is not due yet at now. A start
// half its pace early is let through: the pace is an average, and
// answer times vary. s.mu is held.
func (s *Slots) paced(u *keyUse, now time.Time) bool {
	return s.pacing(u) && now.Before(u.next.Add(-s.pace(u)/2))
}

// Crowded is, for a claim for n slots, the keys whose rows it must take
// fewer of, each with the slots it may fill: a key holding its share (or
// not answered yet and holding all but the headroom) at most n less the
// room it leaves, none when n is no more, so the last free slots stay
// for the other keys' rows; a paced key no more than the slots it could
// hold and a few more (ahead), less those it holds and its units waiting
// already: those start at its pace and leave the free slots meanwhile to
// others, and the few more let one claim serve several of its starts.
func (s *Slots) Crowded(n int) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	sharing := s.sharing(now)
	room := s.room(sharing)
	var most map[string]int
	limit := func(k string, m int) {
		if m = max(m, 0); m < n {
			if most == nil {
				most = map[string]int{}
			}
			if was, ok := most[k]; !ok || m < was {
				most[k] = m
			}
		}
	}
	for k, u := range s.active {
		if s.heldBack(u, sharing) {
			limit(k, n-room)
		}
		if s.pacing(u) {
			limit(k, s.cap+s.ahead()-u.held-u.waiting)
		}
	}
	return most
}

// Shared reports whether a key is crowded or paced now: a Lane then
// claims for any free slot, not for its Refill. The slots a crowded key
// leaves are the headroom, fewer than a Refill may be, and a paced key's
// come back one at a time: waiting for more, a claim would wait for the
// slow key's requests to end, the others' rows with it.
func (s *Slots) Shared() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sharing := s.sharing(s.clock())
	for _, u := range s.active {
		if s.heldBack(u, sharing) || s.pacing(u) {
			return true
		}
	}
	return false
}

// AcquireFor waits for one slot for a unit of key, which it takes when a
// slot is free and key is not crowded, or, crowded, when more than the
// headroom is free. It reports whether it took one: false when ctx ended
// first. The slot is key's (take); Release gives it back with ReleaseFor.
//
// Key's pace holds the unit back only for the first half of the time ctx
// leaves it (its lease, for a unit that has one): a unit that waited out
// its lease for a pace would be given back unsent, its attempt counted.
func (s *Slots) AcquireFor(ctx context.Context, key string) bool {
	var paceBy time.Time // from then on key's pace no longer holds this unit back
	if d, ok := ctx.Deadline(); ok {
		paceBy = time.Now().Add(time.Until(d) / 2)
	}
	var waiting *keyUse // key's use, once refused: counted among its units waiting
	took := s.await(ctx, func() bool {
		patient := paceBy.IsZero() || time.Now().Before(paceBy)
		if !s.may(key, s.cap-s.used-len(s.ranks), patient) {
			if waiting == nil {
				waiting = s.use(key)
				waiting.waiting++
				s.note(key, waiting)
			}
			if patient && !paceBy.IsZero() {
				s.wakeAt(s.clock().Add(time.Until(paceBy)))
			}
			return false
		}
		if waiting != nil {
			waiting.waiting--
		}
		s.used++
		s.peak = max(s.peak, s.used)
		s.take(key)
		return true
	})
	if !took && waiting != nil {
		s.mu.Lock()
		waiting.waiting--
		s.note(key, waiting)
		s.mu.Unlock()
	}
	return took
}

// may reports whether key may take one of free slots now: one is free,
// and key leaves the room if it must and, if paced (a unit that can wait),
// is not paced now. A paced key refused has the waiters woken when its
// next start is due. s.mu is held.
func (s *Slots) may(key string, free int, paced bool) bool {
	now := s.clock()
	n := s.sharing(now)
	if free == 0 || s.crowded(key, n) && free <= s.room(n) {
		return false
	}
	if u := s.keys[key]; paced && u != nil && s.paced(u, now) {
		s.wakeAt(u.next)
		return false
	}
	return true
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
	// The slot is taken already: free counts it back in.
	if s.may(key, s.cap-s.used-len(s.ranks)+1, true) {
		s.take(key)
		return true
	}
	s.give(1) // free before the claim too: a Lane's next claim finds what its last did
	return false
}

func (s *Slots) use(key string) *keyUse {
	u := s.keys[key]
	if u == nil {
		u = &keyUse{}
		s.keys[key] = u
	}
	return u
}

// take counts a slot as key's, and puts key's next start its pace later.
func (s *Slots) take(key string) {
	u := s.use(key)
	u.held++
	u.seen = s.clock()
	s.note(key, u)
	if s.pacing(u) {
		u.next = later(u.next, u.seen).Add(s.pace(u))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ReleaseFor gives back one slot of key's, which it held for held: its
// answer time moves a quarter of the way towards held. A slot key's own
// waiting units will take leaves a Lane waiting on Loosened asleep: a
// claim would find key's rows capped as before.
func (s *Slots) ReleaseFor(key string, held time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.keys[key]
	if u != nil && u.held > 0 {
		u.held--
		u.seen = s.clock()
		s.note(key, u)
		if u.answered {
			u.answer += (held - u.answer) / 4
		} else {
			u.answer, u.answered = held, true
		}
	}
	if u != nil && u.waiting > 0 {
		s.give(1)
		return
	}
	s.release(1)
}

// wakeAt wakes the waiters at t, when a paced key's next start is due,
// unless a wake-up is set for sooner. s.mu is held.
func (s *Slots) wakeAt(t time.Time) {
	if s.paceTimer != nil && s.paceAt.After(s.clock()) && !s.paceAt.After(t) {
		return
	}
	s.paceAt = t
	d := t.Sub(s.clock())
	if s.paceTimer == nil {
		s.paceTimer = time.AfterFunc(d, func() {
			s.mu.Lock()
			s.paceAt = time.Time{} // none set: the next wakeAt sets one
			s.wake()
			s.mu.Unlock()
		})
		return
	}
	s.paceTimer.Reset(d)
}

// SetClock makes now the Slots' clock for paces and shares, in place of
// time.Now: tests step it rather than wait.
func (s *Slots) SetClock(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

// clock is the time now; s.mu is held.
func (s *Slots) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
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

// Loosened is closed when a slot is next given back that a claim may
// fill: a Lane whose keys are crowded waits on it to claim again. A slot
// its key's own waiting units will take is not one.
func (s *Slots) Loosened() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.looser
}
