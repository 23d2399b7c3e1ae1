// Package eventually waits, in tests, for a condition the code reaches in
// its own time. Until polls the condition with a short backoff and fails
// the test, naming what it waited for, once a generous limit has passed:
// the limit bounds a hang, it is never a speed assertion, so a slow or
// loaded machine only makes the wait longer, not the test fail.
package eventually

import (
	"testing"
	"time"
)

// The backoff between polls starts at firstPoll and doubles up to
// lastPoll: a condition that holds soon is seen soon, and one that is a
// database query does not load the machine it waits on.
const (
	firstPoll = time.Millisecond
	lastPoll  = 25 * time.Millisecond
)

// Until returns once cond holds, and fails the test if it still does not
// after limit.
func Until(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	Explain(t, what, limit, cond, nil)
}

// Explain is Until, and when the limit passes it adds what detail returns
// (a log, the state seen) to the failure.
func Explain(t testing.TB, what string, limit time.Duration, cond func() bool, detail func() string) {
	t.Helper()
	if Within(limit, cond) {
		return
	}
	if detail != nil {
		t.Fatalf("timed out after %s waiting for %s\n%s", limit, what, detail())
	}
	t.Fatalf("timed out after %s waiting for %s", limit, what)
}

// Within polls cond until it holds (true) or limit passes (false), for a
// goroutine that may not fail the test itself.
func Within(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	pause := firstPoll
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		timer := time.NewTimer(pause)
		<-timer.C
		pause = min(2*pause, lastPoll)
	}
	return true
}
