package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/webhook"
)

// Flag types that check their value while the arguments are parsed, so a
// value out of range is a usage error before any configuration is read.

// intAtLeast is an int flag with a lower bound. Put the value's name in
// backquotes in usage (`N`) for the help.
func intAtLeast(fs *flag.FlagSet, name string, def, least int, usage string) *int {
	p := new(int)
	*p = def
	fs.Var(&intValue{p: p, least: least}, name, usage)
	return p
}

type intValue struct {
	p     *int
	least int
}

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a whole number")
	}
	if n < v.least {
		return fmt.Errorf("want at least %d", v.least)
	}
	*v.p = n
	return nil
}

func (v *intValue) String() string {
	if v == nil || v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

// positiveDuration is a duration flag that must be above zero.
func positiveDuration(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = def
	fs.Var((*durationValue)(p), name, usage)
	return p
}

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return errors.New("want a positive duration such as 3s")
	}
	*v = durationValue(d)
	return nil
}

func (v *durationValue) String() string {
	if v == nil {
		return "0s"
	}
	return time.Duration(*v).String()
}

// sinceFlag is --since: an RFC3339 time or an age counted back from when
// it is parsed (parseSince).
func sinceFlag(fs *flag.FlagSet, name, usage string) *time.Time {
	p := new(time.Time)
	fs.Var((*sinceValue)(p), name, usage)
	return p
}

type sinceValue time.Time

func (v *sinceValue) Set(s string) error {
	t, err := webhook.ParseSince(s, time.Now())
	if err != nil {
		// The flag error names the flag and the value already; what
		// ParseSince says of them, for the console's form, is left out.
		return errors.New(strings.TrimPrefix(err.Error(), fmt.Sprintf("--since %q: ", s)))
	}
	*v = sinceValue(t)
	return nil
}

func (v *sinceValue) String() string {
	if v == nil || time.Time(*v).IsZero() {
		return ""
	}
	return time.Time(*v).UTC().Format(time.RFC3339)
}
