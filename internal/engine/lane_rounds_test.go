package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
)

// These tests drive a Lane with an in-memory Source: the engine has no SQL
// of its own, and what is pinned here is the Lane's rule for when it
// claims and with how many slots, whatever the table behind it. None of
// them measures a duration: a poll the lane must not take is an hour, one
// it must take is a millisecond, and waits end on what the lane did, with
// patience to spare on a loaded machine.

// patience bounds every wait for something the lane must do. A lane that
// is right does it in milliseconds; only a broken one uses this up.
const patience = 30 * time.Second

// settle is how long a test watches for a claim the lane must not make. A
// right lane never makes it, so a slow machine cannot fail the test; a
// broken one, polling every millisecond, makes it within the first few.
const settle = 200 * time.Millisecond

// never is a poll the lane must not take within a test.
const never = time.Hour

// laneSource is a Source whose answers are scripted by the claim's index
// (0 for the first), and which records the slots each claim was given,
// once the claim has returned.
type laneSource struct {
	answer func(i, n int) (engine.Claim, error) // nil: nothing due

	mu    sync.Mutex
	calls int
	ns    []int
}

func (s *laneSource) Claim(_ context.Context, n int) (engine.Claim, error) {
	s.mu.Lock()
	i := s.calls
	s.calls++
	s.mu.Unlock()
	c, err := engine.Claim{}, error(nil)
	if s.answer != nil {
		c, err = s.answer(i, n)
	}
	s.mu.Lock()
	s.ns = append(s.ns, n)
	s.mu.Unlock()
	return c, err
}

// claims returns the slots given to each claim so far.
func (s *laneSource) claims() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ns)
}

// waitClaims waits until at least k claims have returned and returns the
// slots each was given.
func (s *laneSource) waitClaims(t *testing.T, k int) []int {
	t.Helper()
	eventually.Until(t, fmt.Sprintf("at least %d claims", k), patience, func() bool { return len(s.claims()) >= k })
	return s.claims()
}

// laneUnit runs run (if set) and counts one row started.
type laneUnit struct{ run func() }

func (u laneUnit) Run(context.Context) engine.Tally {
	if u.run != nil {
		u.run()
	}
	return engine.Tally{Started: 1}
}

func (u laneUnit) Panicked(context.Context, any) engine.Tally { return engine.Tally{} }

// quickUnits returns k units that finish at once.
func quickUnits(k int) []engine.Unit {
	us := make([]engine.Unit, k)
	for i := range us {
		us[i] = laneUnit{}
	}
	return us
}

// runLane runs lane until the test ends it with the returned stop, which
// waits for Run to return.
func runLane(t *testing.T, lane *engine.Lane) (stop func() engine.Tally) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan engine.Tally, 1)
	go func() {
		tally, _ := lane.Run(ctx, engine.RunOptions{})
		done <- tally
	}()
	var once sync.Once
	var tally engine.Tally
	stop = func() engine.Tally {
		once.Do(func() {
			cancel()
			select {
			case tally = <-done:
			case <-time.After(patience):
				t.Errorf("Run did not return within %s of its context ending", patience)
			}
		})
		return tally
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A claim reserves every free slot and may fill fewer: a short claim, an
// empty one, a failed one. The slots it did not fill go back at once, or
// the lane's share of the process's cap shrinks with every such claim —
// most claims of an idle table come back empty — until it claims nothing
// at all. Drains, so the count is read once the lane is done.
func TestLane_ReleasesTheSlotsAClaimDidNotFill(t *testing.T) {
	t.Parallel()
	const capacity = 4
	for _, tc := range []struct {
		name   string
		answer func(n int) (engine.Claim, error)
	}{
		{"short claim", func(int) (engine.Claim, error) {
			return engine.Claim{Units: quickUnits(1), Rows: 1}, nil
		}},
		{"empty claim", func(int) (engine.Claim, error) { return engine.Claim{}, nil }},
		{"failed claim", func(int) (engine.Claim, error) {
			return engine.Claim{}, errors.New("connection reset by peer")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			slots := engine.NewSlots(capacity)
			src := &laneSource{answer: func(_, n int) (engine.Claim, error) { return tc.answer(n) }}
			lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: slots, Poll: never, HotPoll: never})
			for drain := 1; drain <= 3; drain++ {
				_, _ = lane.Run(ctx, engine.RunOptions{UntilIdle: true})
				if n := slots.InUse(); n != 0 {
					t.Fatalf("after drain %d: %d of %d slots still taken, with no unit running", drain, n, capacity)
				}
			}
			if ns := src.claims(); !slices.Equal(ns, []int{capacity, capacity, capacity}) {
				t.Errorf("three drains' claims were given %v slots, want all %d each time", ns, capacity)
			}
		})
	}
}

// The same within one long Run (a shift): while the unit of a short claim
// runs, it holds the only slot taken, and the next claim is given all the
// others.
func TestLane_ShortClaimLeavesTheRestForTheNextClaim(t *testing.T) {
	t.Parallel()
	const capacity = 4
	slots := engine.NewSlots(capacity)
	inUse := make(chan int, 2)
	release := make(chan struct{})
	held := laneUnit{run: func() {
		inUse <- slots.InUse()
		<-release
	}}
	src := &laneSource{answer: func(i, _ int) (engine.Claim, error) {
		if i < 2 {
			return engine.Claim{Units: []engine.Unit{held}, Rows: 1}, nil
		}
		return engine.Claim{}, nil
	}}
	wake := make(chan struct{}, 1)
	// Both polls never: only the test's wake-up makes the second claim.
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: slots, Wake: wake, Poll: never, HotPoll: never})
	stop := runLane(t, lane)
	defer close(release)

	for want := 1; want <= 2; want++ {
		select {
		case n := <-inUse:
			if n != want {
				t.Fatalf("unit %d started with %d slots taken, want %d (one per running unit)", want, n, want)
			}
		case <-time.After(patience):
			t.Fatalf("unit %d never started", want)
		}
		if want == 1 {
			wake <- struct{}{}
		}
	}
	if ns := src.claims(); !slices.Equal(ns, []int{capacity, capacity - 1}) {
		t.Errorf("claims were given %v slots, want [%d %d]: all free ones each time", ns, capacity, capacity-1)
	}
	release <- struct{}{}
	release <- struct{}{}
	if tally := stop(); tally.Claims != 2 || tally.Started != 2 {
		t.Errorf("Run = %+v, want 2 claims, 2 units", tally)
	}
}

// When a Lane claims again, by the rule in Run: at once after a full claim
// (more is due); once more at HotPoll after a claim that found rows or
// followed a wake-up; at Poll when cold — as a Run starts
// (TestLane_StartsCold) and after a claim that found nothing without a
// wake-up (TestLane_ColdAfterAnEmptyClaim); and after a failed claim, at
// the next poll, never at once. "Quiet" is checked with HotPoll a
// millisecond: a lane that went on polling hot would claim again.
func TestLane_WhenItClaimsAgain(t *testing.T) {
	t.Parallel()
	type answer struct {
		rows int
		full bool
		err  error
	}
	for _, tc := range []struct {
		name          string
		poll, hotPoll time.Duration
		first         answer // later claims find nothing
		want          int    // claims that follow without a wake-up
		quiet         bool   // and then none, with the polls as they are
		wakeThenWant  int    // if set: one wake-up, then this many claims in all, and then none
	}{
		{name: "full claim: again at once, though both polls are an hour",
			poll: never, hotPoll: never, first: answer{rows: 4, full: true}, want: 2, quiet: true},
		{name: "full claim, then an empty one: cold, no hot poll",
			poll: never, hotPoll: time.Millisecond, first: answer{rows: 4, full: true}, want: 2, quiet: true},
		{name: "rows found: one more claim at HotPoll, not Poll, then cold",
			poll: never, hotPoll: time.Millisecond, first: answer{rows: 1}, want: 2, quiet: true},
		{name: "nothing found, cold: waits for Poll; a wake-up claims, and once more at HotPoll",
			poll: never, hotPoll: time.Millisecond, first: answer{}, want: 1, quiet: true, wakeThenWant: 3},
		{name: "failed claim: retried at the poll, not at once",
			poll: never, hotPoll: never, first: answer{err: errors.New("connection refused")}, want: 1, quiet: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Scheduled, so that the lane's going cold is an event (NextDue).
			src := &scheduledSource{laneSource: laneSource{answer: func(i, n int) (engine.Claim, error) {
				if i > 0 {
					return engine.Claim{}, nil
				}
				c := engine.Claim{Rows: tc.first.rows, Full: tc.first.full}
				if tc.first.rows > 0 {
					c.Units = quickUnits(min(n, tc.first.rows))
				}
				return c, tc.first.err
			}}}
			wake := make(chan struct{}, 1)
			lane := engine.NewLane(engine.LaneConfig{
				Name: "t", Source: src, Slots: engine.NewSlots(4), Wake: wake,
				Poll: tc.poll, HotPoll: tc.hotPoll,
			})
			stop := runLane(t, lane)
			src.waitClaims(t, tc.want)
			if tc.quiet {
				time.Sleep(settle) // simulates: time passing in which a right lane makes no claim
				if n := len(src.claims()); n != tc.want {
					t.Fatalf("%d claims, want %d and then none until a poll of an hour or a wake-up", n, tc.want)
				}
			}
			if tc.wakeThenWant > 0 {
				eventually.Until(t, "the lane cold before the wake-up", patience, func() bool { return src.asked.Load() >= 1 })
				asked := src.asked.Load()
				wake <- struct{}{}
				src.waitClaims(t, tc.wakeThenWant)
				eventually.Until(t, "the lane cold again after the wake-up's claims", patience, func() bool { return src.asked.Load() > asked })
				if n := len(src.claims()); n != tc.wakeThenWant {
					t.Fatalf("%d claims after the wake-up, want %d and then none: the lane stayed hot", n, tc.wakeThenWant)
				}
			}
			stop()
		})
	}
}

// A Lane with a backlog (its last claim was full) and units still running
// waits for Refill free slots before it claims again, so one claim serves
// several units instead of one claim per freed slot; Refill defaults to
// an eighth of the slots. The lane is watched as each unit ends: until
// the Refill-th, it must not claim; then it claims for exactly those.
func TestLane_BacklogWaitsForRefillFreeSlots(t *testing.T) {
	t.Parallel()
	const capacity = 16
	for _, tc := range []struct {
		name   string
		refill int // in the config
		want   int // slots freed before the next claim
	}{
		{"default: an eighth of the slots", 0, capacity / 8},
		{"configured", 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			slots := engine.NewSlots(capacity)
			releases := make([]chan struct{}, capacity)
			units := make([]engine.Unit, capacity)
			for j := range releases {
				releases[j] = make(chan struct{})
				units[j] = laneUnit{run: func() { <-releases[j] }}
			}
			src := &laneSource{answer: func(i, n int) (engine.Claim, error) {
				if i > 0 {
					return engine.Claim{}, nil
				}
				return engine.Claim{Units: units[:n], Rows: n, Full: true}, nil
			}}
			lane := engine.NewLane(engine.LaneConfig{
				Name: "t", Source: src, Slots: slots, Refill: tc.refill, Poll: never, HotPoll: never,
			})
			stop := runLane(t, lane)
			if ns := src.waitClaims(t, 1); ns[0] != capacity {
				t.Fatalf("first claim given %d slots, want %d", ns[0], capacity)
			}
			for k := 1; k <= tc.want; k++ {
				close(releases[k-1])
				if k == tc.want {
					break
				}
				// Wait for the unit's slot to come back, then give a lane
				// that claims for fewer than Refill the time to do it.
				eventually.Until(t, fmt.Sprintf("the slot of unit %d back", k), patience, func() bool { return slots.InUse() <= capacity-k })
				time.Sleep(settle / 4) // simulates: time passing in which a lane claiming for fewer than Refill would claim
				if ns := src.claims(); len(ns) > 1 {
					t.Fatalf("claimed for %d slots after %d of %d units ended, want no claim before %d are free", ns[1], k, capacity, tc.want)
				}
			}
			if ns := src.waitClaims(t, 2); ns[1] != tc.want {
				t.Errorf("backlog claim given %d slots, want %d", ns[1], tc.want)
			}
			for _, r := range releases[tc.want:] {
				close(r)
			}
			stop()
		})
	}
}

// A lane made hot by a claim that found rows claims once more at HotPoll,
// and when that claim finds nothing it is cold: it asks when the next row
// is due, which only a cold lane does, and makes no third claim. A lane
// that stayed hot would claim every millisecond and never ask.
func TestLane_ColdAfterAnEmptyClaim(t *testing.T) {
	t.Parallel()
	src := &scheduledSource{laneSource: laneSource{answer: func(i, n int) (engine.Claim, error) {
		if i > 0 {
			return engine.Claim{}, nil
		}
		return engine.Claim{Units: quickUnits(1), Rows: 1}, nil
	}}}
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(4), Wake: make(chan struct{}),
		Poll: never, HotPoll: time.Millisecond})
	stop := runLane(t, lane)
	eventually.Until(t, "the lane asks when the next row is due, as a cold lane does", patience, func() bool { return src.asked.Load() >= 1 })
	if n := len(src.claims()); n != 2 {
		t.Errorf("%d claims before the lane went cold, want 2: the one that found a row and one at HotPoll", n)
	}
	stop()
}

// A lane with no wake-ups (behind a pooler with nothing to LISTEN on) goes
// on claiming at HotPoll after a claim that found rows, though the claims
// after it find nothing: no wake-up will tell it of the next row of a
// steady load. So does a lane given HotFor (the webhook retry lane, whose
// claim cannot see the rows an endpoint's in-flight cap holds back). With
// Poll an hour only the hot poll can bring the claims that follow; the
// default HotFor is seconds, where a turn of the loop takes microseconds.
func TestLane_HotForAfterRowsWithoutWakeUps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		wake   chan struct{}
		hotFor time.Duration
	}{
		{"no wake-ups: DefaultHotFor", nil, 0},
		{"wake-ups and HotFor set", make(chan struct{}), never},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := &laneSource{answer: func(i, n int) (engine.Claim, error) {
				if i > 0 {
					return engine.Claim{}, nil
				}
				return engine.Claim{Units: quickUnits(1), Rows: 1}, nil
			}}
			lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(4), Wake: tc.wake,
				Poll: never, HotPoll: time.Millisecond, HotFor: tc.hotFor})
			stop := runLane(t, lane)
			src.waitClaims(t, 4)
			stop()
		})
	}
}

// A wake-up makes a lane given HotFor hot for HotFor, though its claims
// find nothing: the retry lane is woken when deliveries are born held
// for it, which its claim may not take at once. The lane finds nothing
// from the start; with Poll an hour, only hot polls bring more than the
// wake-up's claim and the one after it.
func TestLane_HotForAfterAWakeUp(t *testing.T) {
	t.Parallel()
	src := &laneSource{answer: func(int, int) (engine.Claim, error) { return engine.Claim{}, nil }}
	wake := make(chan struct{}, 1)
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(4), Wake: wake,
		Poll: never, HotPoll: time.Millisecond, HotFor: never})
	stop := runLane(t, lane)
	src.waitClaims(t, 1)
	wake <- struct{}{}
	src.waitClaims(t, 5)
	stop()
}
