package bench

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCountWindows(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		at    []time.Time
		width time.Duration
		n     int
		want  []int
	}{
		{"none", nil, time.Second, 3, []int{0, 0, 0}},
		{"edges belong to the later window", at(0, 999, 1000, 1999, 2000), time.Second, 3, []int{2, 2, 1}},
		{"before the origin and past the last window are left out", at(-1, 500, 3000), time.Second, 3, []int{1, 0, 0}},
		{"five-second windows", at(0, 4999, 5000, 9000, 14999), 5 * time.Second, 3, []int{2, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := countWindows(tc.at, t0, tc.width, tc.n); !slices.Equal(got, tc.want) {
				t.Errorf("countWindows = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBursts(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	for _, tc := range []struct {
		name string
		at   []time.Time
		want []int
	}{
		{"none", nil, nil},
		{"one", []time.Time{ms(0)}, []int{1}},
		{"a burst then probes a cool-down apart", []time.Time{ms(0), ms(10), ms(20), ms(2000), ms(4000), ms(4100)}, []int{3, 1, 2}},
		{"a gap of exactly the threshold splits", []time.Time{ms(0), ms(500)}, []int{1, 1}},
		{"just under it does not", []time.Time{ms(0), ms(499)}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []int
			for _, b := range bursts(tc.at, 500*time.Millisecond) {
				got = append(got, b.n)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("bursts = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPerReplica: a delivery counts for the replica whose User-Agent sent
// it; failures count for none, and agents that are no replica's in the
// last slot.
func TestPerReplica(t *testing.T) {
	t.Parallel()
	hits := []hit{
		{agent: replicaAgent(0), status: 204},
		{agent: replicaAgent(2), status: 200},
		{agent: replicaAgent(2), status: 204},
		{agent: replicaAgent(1), status: 500},
		{agent: replicaAgent(3), status: 204}, // beyond the replicas started
		{agent: "postbox-webhook/1", status: 204},
	}
	if got, want := perReplica(hits, 3), []int{1, 0, 2, 2}; !slices.Equal(got, want) {
		t.Errorf("perReplica = %v, want %v", got, want)
	}
	for _, agent := range []string{"", "postbox-bench-replica/", "postbox-bench-replica/x", "postbox-bench-replica/-1"} {
		if i, ok := replicaOf(agent); ok {
			t.Errorf("replicaOf(%q) = %d, want no replica", agent, i)
		}
	}
}

func TestRetryLags(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hits := []hit{
		{key: hookKey{0, "a"}, nth: 1, at: t0},
		{key: hookKey{0, "a"}, nth: 2, at: t0.Add(700 * time.Millisecond)},
		{key: hookKey{0, "b"}, nth: 2, at: t0.Add(time.Second)},
		{key: hookKey{0, "a"}, nth: 3, at: t0.Add(9 * time.Second)}, // only the first retry is timed
		{key: hookKey{0, "c"}, nth: 2, at: t0},                      // no due time logged
	}
	due := map[string]time.Time{"a": t0.Add(500 * time.Millisecond), "b": t0.Add(200 * time.Millisecond)}
	lags, missing := retryLags(hits, due)
	if want := []time.Duration{200 * time.Millisecond, 800 * time.Millisecond}; !slices.Equal(lags, want) || missing != 1 {
		t.Errorf("retryLags = %v, %d missing; want %v, 1 missing", lags, missing, want)
	}
}

// TestReceivers_Answers: each failing mode answers as the sections read
// it, per delivery, and only successes count as delivered.
func TestReceivers_Answers(t *testing.T) {
	t.Parallel()
	post := func(t *testing.T, rc *receivers, id string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, rc.servers[0].URL, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("webhook-id", id)
		req.Header.Set("User-Agent", replicaAgent(1))
		// The server's own client: another test's httptest server closing
		// drops idle connections of http.DefaultClient, a request's too.
		resp, err := rc.servers[0].Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name string
		opts receiverOptions
		ids  []string
		want []int
	}{
		{"accepts", receiverOptions{}, []string{"a", "a"}, []int{204, 204}},
		{"fails the first attempt of each delivery", receiverOptions{failFirst: true}, []string{"a", "b", "a", "a", "b"}, []int{500, 500, 204, 204, 204}},
		{"always fails", receiverOptions{failAll: true}, []string{"a", "a"}, []int{500, 500}},
		{"refuses what its function names", receiverOptions{refuse: func(k hookKey, nth int) bool { return k.id == "b" || nth == 2 }},
			[]string{"a", "b", "a", "a"}, []int{204, 500, 500, 204}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := startReceiversWith(1, tc.opts)
			defer rc.close()
			var got []int
			for _, id := range tc.ids {
				got = append(got, post(t, rc, id))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("answers %v, want %v", got, tc.want)
			}
			ok := 0
			for _, s := range tc.want {
				if s < 300 {
					ok++
				}
			}
			if total, _ := rc.counts(); total != ok {
				t.Errorf("counts: %d delivered, want %d", total, ok)
			}
			if log := rc.log(); len(log) != len(tc.ids) || log[len(log)-1].nth != countOf(tc.ids, tc.ids[len(tc.ids)-1]) {
				t.Errorf("log %+v: want one hit per request, the last numbered by its delivery's requests", log)
			}
		})
	}
	t.Run("fails a seeded share", func(t *testing.T) {
		t.Parallel()
		draw := func() []int {
			rc := startReceiversWith(1, receiverOptions{failShare: 0.5, seed: 7})
			defer rc.close()
			var got []int
			for range 200 {
				got = append(got, post(t, rc, "x"))
			}
			return got
		}
		a, b := draw(), draw()
		if !slices.Equal(a, b) {
			t.Error("two receivers with one seed answered differently")
		}
		if failed := countOf(a, 500); failed < 70 || failed > 130 {
			t.Errorf("%d of 200 failed, want about half", failed)
		}
	})
}

func countOf[T comparable](s []T, v T) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestReadOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	order := map[string]eventPlace{
		"a1": {"a", 1}, "a2": {"a", 2}, "a3": {"a", 3},
		"b1": {"b", 10}, "b2": {"b", 20},
		"h1": {hotKey, 5}, "h2": {hotKey, 6}, "h3": {hotKey, 7},
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ok := func(id string, ms int) hit { return hit{key: hookKey{0, id}, at: at(ms), status: http.StatusNoContent} }
	failed := func(id string, ms int) hit {
		return hit{key: hookKey{0, id}, at: at(ms), status: http.StatusInternalServerError}
	}
	for _, tc := range []struct {
		name       string
		hits       []hit
		inversions int
		hot, other int // spans' deliveries
		hotRate    float64
	}{
		{"in order", []hit{ok("a1", 0), ok("b1", 1), ok("a2", 2), ok("b2", 3), ok("a3", 4)}, 0, 0, 5, 0},
		{"a later event before an earlier one", []hit{ok("a2", 0), ok("a1", 1), ok("a3", 2)}, 1, 0, 3, 0},
		{"two keys interleaved are not inversions", []hit{ok("b1", 0), ok("a1", 1), ok("b2", 2), ok("a2", 3)}, 0, 0, 4, 0},
		{"a failed request is not a delivery", []hit{failed("a2", 0), ok("a1", 1), ok("a2", 2)}, 0, 0, 2, 0},
		{"a duplicate of a delivered event is no inversion", []hit{ok("a1", 0), ok("a2", 1), ok("a1", 2), ok("a3", 3)}, 0, 0, 3, 0},
		{"the hot key's span is its own", []hit{ok("h1", 0), ok("a1", 10), ok("h2", 500), ok("h3", 1000)}, 0, 3, 1, 2},
		{"unkeyed events are left out", []hit{ok("x", 0), ok("a1", 1)}, 0, 0, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv, hot, other := readOrder(tc.hits, order)
			if inv != tc.inversions || hot.n != tc.hot || other.n != tc.other || hot.rate() != tc.hotRate {
				t.Errorf("readOrder = %d inversions, hot %d (%.2f/s), others %d; want %d, %d (%.2f/s), %d",
					inv, hot.n, hot.rate(), other.n, tc.inversions, tc.hot, tc.hotRate, tc.other)
			}
		})
	}
}

// TestIsoCheck: the isolation section's reading of the receiver's log —
// a request counts against the tenant its event, or its clone's original,
// was enqueued for; an original is reached directly or through a
// recovery's clone, a replay only by itself.
func TestIsoCheck(t *testing.T) {
	t.Parallel()
	// Tenant 0 owns endpoints 0 and 1, tenant 1 endpoints 2 and 3.
	ledger := func() *isoLedger {
		return &isoLedger{order: []string{"a", "b"}, tenantOf: map[string]int{"a": 0, "b": 1},
			addressed: map[string]int{"b": 3}, replayOf: map[string]string{"ra": "a"}}
	}
	ok := func(e int, id string) hit { return hit{key: hookKey{e, id}, status: 204} }
	refused := func(e int, id string) hit { return hit{key: hookKey{e, id}, status: 500} }
	all := []hit{ok(0, "a"), refused(1, "a"), ok(1, "a"), ok(3, "b"), ok(0, "ra"), ok(1, "ra")}
	for _, tc := range []struct {
		name   string
		hits   []hit
		rootOf map[string]string
		want   isoChecked
	}{
		{"every delivery", all, map[string]string{"ra": "a"}, isoChecked{refused: 1, delivered: 5}},
		{"a recovery's clone stands in for its original", []hit{ok(0, "a"), ok(1, "ca"), ok(3, "b"), ok(0, "ra"), ok(1, "ra")},
			map[string]string{"ra": "a", "ca": "a"}, isoChecked{delivered: 5, recovered: 1}},
		{"a request to another tenant's endpoint, even refused", append(all, refused(2, "a"), ok(1, "b")), map[string]string{"ra": "a"},
			isoChecked{crossed: 2, refused: 2, delivered: 6}},
		{"a clone's tenant is its original's", append(all, ok(2, "ra")), map[string]string{"ra": "a"}, isoChecked{crossed: 1, refused: 1, delivered: 6}},
		{"an addressed event at its tenant's other endpoint", append(all, ok(2, "b")), map[string]string{"ra": "a"}, isoChecked{stray: 1, refused: 1, delivered: 6}},
		{"an event the bench did not enqueue", append(all, ok(0, "x")), map[string]string{"ra": "a"}, isoChecked{unknown: 1, refused: 1, delivered: 6}},
		{"missing and duplicated", []hit{ok(0, "a"), ok(0, "a"), ok(3, "b"), ok(0, "ra")}, map[string]string{"ra": "a"},
			isoChecked{missing: 2, dups: 1, delivered: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := isoCheck(ledger(), tc.hits, tc.rootOf)
			if err != nil {
				t.Fatal(err)
			}
			got.hits, got.replays = nil, nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("isoCheck = %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := isoCheck(ledger(), all, map[string]string{"ra": "b"}); err == nil {
		t.Error("a replay whose replay_of names another original passed")
	}
}
