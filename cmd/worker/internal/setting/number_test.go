package setting

import (
	"strings"
	"testing"
)

// Number accepts a finite number in its interval, bounds as open or
// closed as the interval says, and refuses everything else — NaN and the
// infinities included — naming the variable and the range.
func TestNumber(t *testing.T) {
	t.Parallel()
	var (
		leftOpen = Interval{Lo: 0, Hi: 1, LoOpen: true}
		closed   = Interval{Lo: 0, Hi: 1}
		open     = Interval{Lo: 0, Hi: 1, LoOpen: true, HiOpen: true}
	)
	for _, tc := range []struct {
		name string
		r    Interval
		s    string
		want float64
		err  string // the whole error; the case expects one when set
	}{
		{name: "inside", r: leftOpen, s: "0.5", want: 0.5},
		{name: "spaces trimmed", r: leftOpen, s: " 0.25 ", want: 0.25},
		{name: "closed upper bound", r: leftOpen, s: "1", want: 1},
		{name: "closed lower bound", r: closed, s: "0", want: 0},
		{name: "open lower bound", r: leftOpen, s: "0", err: `X="0": must be a finite number in (0, 1]`},
		{name: "open upper bound", r: open, s: "1", err: `X="1": must be a finite number in (0, 1)`},
		{name: "above", r: closed, s: "1.0000001", err: `X="1.0000001": must be a finite number in [0, 1]`},
		{name: "below", r: closed, s: "-0.1", err: `X="-0.1": must be a finite number in [0, 1]`},
		{name: "NaN", r: closed, s: "NaN", err: `X="NaN": must be a finite number in [0, 1]`},
		{name: "Inf", r: Interval{Lo: 0, Hi: 1e308}, s: "+Inf", err: `X="+Inf": must be a finite number in [0, 1e+308]`},
		{name: "not a number", r: closed, s: "half", err: `X="half": must be a finite number in [0, 1]`},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			got, err := Number("X", tc.s, tc.r)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("Number(%q) = %v, %v; want the error %q", tc.s, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Number(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
			}
		})
	}
}

// NaN is in no interval, however it is bounded.
func TestIntervalRefusesNaN(t *testing.T) {
	t.Parallel()
	nan := func() float64 { var z float64; return z / z }()
	for _, r := range []Interval{{Lo: 0, Hi: 1}, {Lo: 0, Hi: 1, LoOpen: true, HiOpen: true}, {Lo: -1e308, Hi: 1e308}} {
		if r.Contains(nan) {
			t.Errorf("%s contains NaN", r)
		}
	}
}
