package bench

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
)

func TestFairShare(t *testing.T) {
	t.Parallel()
	share, ratio := fairShare(32, 2, 27)
	if share != 30 || ratio != 0.9 {
		t.Errorf("fairShare(32, 2, 27) = %v, %v; want 30, 0.9", share, ratio)
	}
	if _, ratio := fairShare(32, 32, 1); ratio != 0 {
		t.Errorf("no share left: ratio %v, want 0", ratio)
	}
}

func TestMeanP50(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []int
		mean float64
		p50  int
	}{
		{nil, 0, 0},
		{[]int{7}, 7, 7},
		{[]int{32, 0, 31, 32}, 23.75, 31},
		{[]int{3, 1, 2}, 2, 2},
	} {
		if mean, p50 := meanP50(tc.in); mean != tc.mean || p50 != tc.p50 {
			t.Errorf("meanP50(%v) = %v, %d; want %v, %d", tc.in, mean, p50, tc.mean, tc.p50)
		}
	}
}

func TestHookFairKey_RoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0195f3c2-7a4e-7d1b-9c3e-2f6a8b1d4e5f", "evt_t3_17", "a/b"} {
		if got := hookFairKey(hookFairDelivery(3, id)); got != (hookKey{3, id}) {
			t.Errorf("hookFairKey(hookFairDelivery(3, %q)) = %v", id, got)
		}
	}
	commits := hookFairCommits(map[string]time.Time{hookFairDelivery(1, "x"): time.Unix(5, 0)})
	if at, ok := commits[hookKey{1, "x"}]; !ok || !at.Equal(time.Unix(5, 0)) {
		t.Errorf("hookFairCommits: %v", commits)
	}
}

// TestHookFairLatencies: a delivery made is timed to its first request, one
// not made to the bound, and counted missing.
func TestHookFairLatencies(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	commits := map[hookKey]time.Time{{1, "a"}: t0, {2, "b"}: t0.Add(time.Second)}
	firsts := map[hookKey]time.Time{{1, "a"}: t0.Add(30 * time.Millisecond), {2, "a"}: t0}
	lat, missing := hookFairLatencies(commits, firsts, t0.Add(5*time.Second))
	slices.Sort(lat)
	if want := []time.Duration{30 * time.Millisecond, 4 * time.Second}; !slices.Equal(lat, want) || missing != 1 {
		t.Errorf("hookFairLatencies = %v, %d missing; want %v, 1 missing", lat, missing, want)
	}
}

func TestArrivals(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	hits := []hit{
		{key: hookKey{0, "a"}, at: t0.Add(-time.Millisecond), status: 204}, // before the window
		{key: hookKey{0, "b"}, at: t0, status: 204},
		{key: hookKey{0, "c"}, at: t0.Add(time.Second), status: 500}, // refused
		{key: hookKey{3, "d"}, at: t0.Add(time.Second), status: 204},
		{key: hookKey{0, "e"}, at: t0.Add(2 * time.Second), status: 204}, // the window's end is out
	}
	if a, others := arrivals(hits, t0, t0.Add(2*time.Second)); a != 1 || others != 1 {
		t.Errorf("arrivals = %d, %d; want 1, 1", a, others)
	}
}

// TestHookFairReceiver_HoldsTheAnswer: the receiver logs a request as it
// arrives, but the sender gets the answer only after the endpoint's time,
// and the request counts as in flight at A's receiver (endpoint 0) or the
// others' until then.
func TestHookFairReceiver_HoldsTheAnswer(t *testing.T) {
	t.Parallel()
	const slow = 3 * time.Second // long enough that the three are held at once on a busy machine
	rcv := startHookFairReceiver(slow)
	defer rcv.close()
	post := func(endpoint int, id string) time.Duration {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, rcv.url(endpoint), strings.NewReader("{}"))
		if err != nil {
			t.Error(err)
			return 0
		}
		req.Header.Set("webhook-id", id)
		start := time.Now()
		resp, err := rcv.srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("endpoint %d answered %d", endpoint, resp.StatusCode)
		}
		return time.Since(start)
	}
	took := make(chan time.Duration, 3)
	for i := range cap(took) {
		go func() { took <- post(0, "a"+string(rune('0'+i))) }()
	}
	eventually.Within(slow/2, func() bool { return rcv.a.now.Load() >= 3 })
	if n := rcv.a.now.Load(); n != 3 {
		t.Errorf("%d requests in flight at A's receiver, want 3", n)
	}
	if missing := rcv.hooks.missing([]hookKey{{0, "a0"}, {0, "a1"}, {0, "a2"}, {0, "zz"}}); missing != 1 {
		t.Errorf("%d deliveries missing while held, want 1 (logged as they arrive)", missing)
	}
	for range cap(took) {
		if d := <-took; d < slow {
			t.Errorf("one of A's requests answered after %s, before the endpoint's %s", d, slow)
		}
	}
	if d := post(4, "b"); d < hookFairQuick {
		t.Errorf("B…K's request answered after %s, before %s", d, hookFairQuick)
	}
	if a, o := rcv.a.now.Load(), rcv.others.now.Load(); a != 0 || o != 0 {
		t.Errorf("%d and %d in flight after every answer, want 0", a, o)
	}
	if a, o := rcv.a.peak.Load(), rcv.others.peak.Load(); a != 3 || o != 1 {
		t.Errorf("peaks %d and %d, want 3 and 1", a, o)
	}
	hits := rcv.hooks.log()
	if len(hits) != 4 || hits[3].key != (hookKey{4, "b"}) {
		t.Errorf("the receiver logged %v", hits)
	}
}

// TestHookFairRuns: cases 1 and 3 run again with a snapshot held when
// WebhookFairHold says so, on postbox's path only, or on every path with
// WebhookFairHoldAll; case 2 never.
func TestHookFairRuns(t *testing.T) {
	t.Parallel()
	const (
		pb, old, peer = "postbox worker run", "postbox baseline binary", "River peer, tuned"
		held          = ", snapshot held"
	)
	for _, tc := range []struct {
		name      string
		hold, all bool
		holds     bool // the case holds (1 and 3)
		want      []string
	}{
		{"no hold", false, false, true, []string{pb, old, peer}},
		{"all without hold", false, true, true, []string{pb, old, peer}},
		{"hold, case 2", true, true, false, []string{pb, old, peer}},
		{"hold", true, false, true, []string{pb, old, peer, pb + held}},
		{"hold all", true, true, true, []string{pb, old, peer, pb + held, old + held, peer + held}},
	} {
		pr := &poolRunner{po: PoolOptions{WebhookFairBaseline: "/old/worker", WebhookFairHold: tc.hold, WebhookFairHoldAll: tc.all}}
		var got []string
		for _, r := range pr.hookFairRuns(tc.holds) {
			got = append(got, r.name())
			if r.baseline != (r.p.bin != "") {
				t.Errorf("%s: %s: baseline %v, binary %q", tc.name, r.name(), r.baseline, r.p.bin)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: runs %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPoolOptions_ValidateWebhookFair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		set  func(*PoolOptions)
	}{
		{"a missing baseline", func(o *PoolOptions) { o.WebhookFairBaseline = dir + "/no-such-worker" }},
		{"a directory as the baseline", func(o *PoolOptions) { o.WebhookFairBaseline = dir }},
		{"a load under a second", func(o *PoolOptions) { o.WebhookFairLoad = 500 * time.Millisecond }},
	} {
		o := DefaultPool()
		tc.set(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "webhook fairness") {
			t.Errorf("Validate of %s: %v, want a webhook fairness error", tc.name, err)
		}
	}
	if q := QuickPool(); q.hookFairAloneWindow() != 6*time.Second || DefaultPool().hookFairAloneWindow() != 20*time.Second {
		t.Errorf("A alone is read for %s (quick) and %s (full), want 6s and 20s", q.hookFairAloneWindow(), DefaultPool().hookFairAloneWindow())
	}
}

// commitsAfter keeps the commits made after t, not at it nor before.
func TestCommitsAfter(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	commits := map[hookKey]time.Time{{1, "before"}: t0.Add(-time.Millisecond), {1, "at"}: t0, {2, "after"}: t0.Add(time.Millisecond)}
	got := commitsAfter(commits, t0)
	if len(got) != 1 || !got[hookKey{2, "after"}].Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("commitsAfter = %v, want the one after", got)
	}
}
