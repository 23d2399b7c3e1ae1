package setting

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Interval is the range a number setting accepts. Comparisons with NaN
// are all false, so a check written as "refuse x < lo or x > hi" lets NaN
// through; Contains asks the other way round, and NaN is in no interval.
type Interval struct {
	Lo, Hi         float64
	LoOpen, HiOpen bool
}

// Contains reports whether x is in r; NaN never is.
func (r Interval) Contains(x float64) bool {
	above := x > r.Lo || (!r.LoOpen && x == r.Lo)
	below := x < r.Hi || (!r.HiOpen && x == r.Hi)
	return above && below
}

// String is the interval as the configuration reference writes it:
// "(0, 1]", "[0, 1]".
func (r Interval) String() string {
	open, closed := "[", "]"
	if r.LoOpen {
		open = "("
	}
	if r.HiOpen {
		closed = ")"
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	return open + f(r.Lo) + ", " + f(r.Hi) + closed
}

// Number reads name's value s as a finite number in r; anything else
// (NaN, Inf, out of range, not a number) is an error naming the variable
// and the range.
func Number(name, s string, r Interval) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsInf(x, 0) || !r.Contains(x) {
		return 0, fmt.Errorf("%s=%q: must be a finite number in %s", name, s, r)
	}
	return x, nil
}
