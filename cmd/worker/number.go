package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// interval is the range a number setting accepts. Comparisons with NaN
// are all false, so a check written as "refuse x < lo or x > hi" lets NaN
// through; contains asks the other way round, and NaN is in no interval.
type interval struct {
	lo, hi         float64
	loOpen, hiOpen bool
}

func (r interval) contains(x float64) bool {
	above := x > r.lo || (!r.loOpen && x == r.lo)
	below := x < r.hi || (!r.hiOpen && x == r.hi)
	return above && below
}

// String is the interval as the configuration reference writes it:
// "(0, 1]", "[0, 1]".
func (r interval) String() string {
	open, closed := "[", "]"
	if r.loOpen {
		open = "("
	}
	if r.hiOpen {
		closed = ")"
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	return open + f(r.lo) + ", " + f(r.hi) + closed
}

// parseNumber reads name's value s as a finite number in r; anything else
// (NaN, Inf, out of range, not a number) is an error naming the variable
// and the range.
func parseNumber(name, s string, r interval) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsInf(x, 0) || !r.contains(x) {
		return 0, fmt.Errorf("%s=%q: must be a finite number in %s", name, s, r)
	}
	return x, nil
}
