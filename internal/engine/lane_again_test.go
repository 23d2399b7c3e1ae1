package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
)

// A claim whose Source held due rows back (Claim.Again: a pool-wide rate's
// bucket was empty) is followed by the next claim when the Source said,
// not at the hot poll and not on a wake-up — the bucket has no tokens
// for either — and not a whole Poll later; and a drain does not take it
// for idle. Durations are an hour where the lane must not claim and a
// millisecond where it must, as in lane_rounds_test.go.
func TestLane_HeldRowsClaimedWhenTheSourceSays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		again         time.Duration // every claim's answer: one row, and this
		poll, hotPoll time.Duration
		wake          bool // a wake-up after the first claim
		want          int  // claims to wait for
		quiet         bool // and then none
	}{
		{name: "not on a wake-up or the hot poll while held",
			again: never, poll: never, hotPoll: time.Millisecond, wake: true, want: 1, quiet: true},
		{name: "again once the Source's wait has passed, though both polls are an hour",
			again: time.Millisecond, poll: never, hotPoll: never, want: 3},
		{name: "at most Poll later, for a Source that holds rows for long",
			again: never, poll: time.Millisecond, hotPoll: never, want: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := &laneSource{answer: func(i, n int) (engine.Claim, error) {
				return engine.Claim{Units: quickUnits(1), Rows: 1, Again: tc.again}, nil
			}}
			wake := make(chan struct{}, 1)
			lane := engine.NewLane(engine.LaneConfig{
				Name: "t", Source: src, Slots: engine.NewSlots(4), Wake: wake,
				Poll: tc.poll, HotPoll: tc.hotPoll,
			})
			stop := runLane(t, lane)
			src.waitClaims(t, 1)
			if tc.wake {
				wake <- struct{}{}
			}
			src.waitClaims(t, tc.want)
			if tc.quiet {
				time.Sleep(settle) // simulates: time passing in which a right lane makes no claim
				if n := len(src.claims()); n != tc.want {
					t.Fatalf("%d claims, want %d: the Source holds its rows for an hour", n, tc.want)
				}
			}
			stop()
		})
	}
}

// A drain (UntilIdle) whose claim was held back by the Source's limit
// waits for it and claims again; it ends at the first claim that finds
// nothing due.
func TestLane_DrainWaitsOutHeldRows(t *testing.T) {
	t.Parallel()
	src := &laneSource{answer: func(i, n int) (engine.Claim, error) {
		if i < 2 {
			return engine.Claim{Units: quickUnits(1), Rows: 1, Again: time.Millisecond}, nil
		}
		return engine.Claim{}, nil
	}}
	lane := engine.NewLane(engine.LaneConfig{Name: "t", Source: src, Slots: engine.NewSlots(4), Poll: never, HotPoll: never})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	tally, err := lane.Run(ctx, engine.RunOptions{UntilIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(src.claims()); n != 3 || tally.Claimed != 2 {
		t.Fatalf("%d claims, %d rows; want 3 claims (two held, one empty) and 2 rows", n, tally.Claimed)
	}
}
