package bench

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// receivers are loopback webhook endpoints, one server each, that log
// every request they get: which endpoint, the webhook-id (the event, so
// per endpoint the delivery), the User-Agent (which replica sent it, see
// replicaAgent), when, and what they answered. Successes are counted per
// endpoint and webhook-id, so duplicates show.
type receivers struct {
	servers  []*httptest.Server
	opts     receiverOptions
	mu       sync.Mutex
	got      map[hookKey]int // successful deliveries per key
	requests map[hookKey]int // requests per key
	total    int             // successful deliveries
	hits     []hit           // every request, in arrival order
	rng      *rand.Rand      // opts.failShare's draws, under mu
}

// hookKey names one delivery at the receiver: endpoint index and webhook-id.
type hookKey struct {
	endpoint int
	id       string
}

// hit is one request a receiver answered.
type hit struct {
	key    hookKey
	agent  string
	at     time.Time // when it arrived
	status int
	nth    int // the key's nth request, from 1
}

// receiverOptions shape how receivers answer.
type receiverOptions struct {
	// delay is the time before each answer.
	delay time.Duration
	// failFirst answers 500 to the first request of every delivery and
	// 204 to the ones after.
	failFirst bool
	// failShare answers 500 to this share of requests, drawn from a
	// generator seeded with seed.
	failShare float64
	seed      uint64
	// failAll answers 500 to every request.
	failAll bool
	// refuse, when set, answers 500 to the nth request of delivery k
	// when it returns true. It runs under the receivers' lock.
	refuse func(k hookKey, nth int) bool
	// byPath tells endpoints apart by the path /e/<i> rather than by
	// server: one server stands for many endpoints.
	byPath bool
}

func startReceivers(n int) *receivers { return startReceiversWith(n, receiverOptions{}) }

func startReceiversWith(n int, o receiverOptions) *receivers {
	rc := &receivers{opts: o, got: map[hookKey]int{}, requests: map[hookKey]int{}, rng: rand.New(rand.NewPCG(o.seed, 0x706f7374626f78))}
	for i := range n {
		rc.servers = append(rc.servers, httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			at := time.Now()
			if o.delay > 0 {
				time.Sleep(o.delay)
			}
			endpoint := i
			if o.byPath {
				endpoint, _ = strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/e/"))
			}
			status := rc.record(hookKey{endpoint, req.Header.Get("webhook-id")}, req.Header.Get("User-Agent"), at)
			w.WriteHeader(status)
		})))
	}
	return rc
}

// record logs one request and decides its answer.
func (rc *receivers) record(k hookKey, agent string, at time.Time) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.requests[k]++
	nth := rc.requests[k]
	status := http.StatusNoContent
	switch {
	case rc.opts.failAll,
		rc.opts.failFirst && nth == 1,
		rc.opts.failShare > 0 && rc.rng.Float64() < rc.opts.failShare,
		rc.opts.refuse != nil && rc.opts.refuse(k, nth):
		status = http.StatusInternalServerError
	}
	rc.hits = append(rc.hits, hit{key: k, agent: agent, at: at, status: status, nth: nth})
	if status < 300 {
		rc.got[k]++
		rc.total++
	}
	return status
}

func (rc *receivers) close() {
	for _, s := range rc.servers {
		s.Close()
	}
}

// counts are the successful deliveries and how many distinct ones.
func (rc *receivers) counts() (total, distinct int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.total, len(rc.got)
}

// log is a copy of every request so far, in order of arrival.
func (rc *receivers) log() []hit {
	rc.mu.Lock()
	hits := slices.Clone(rc.hits)
	rc.mu.Unlock()
	// Handlers take the time before the lock: two may append out of order.
	slices.SortStableFunc(hits, func(a, b hit) int { return a.at.Compare(b.at) })
	return hits
}

// replicaAgent is the User-Agent of `worker run` replica i
// (WEBHOOK_USER_AGENT): a receiver tells the replicas apart by it.
func replicaAgent(i int) string { return "postbox-bench-replica/" + strconv.Itoa(i) }

// replicaOf reads replicaAgent back; ok is false for any other agent.
func replicaOf(agent string) (int, bool) {
	s, ok := strings.CutPrefix(agent, "postbox-bench-replica/")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}

// perReplica counts the successful hits of each of n replicas; the last
// count is of hits no replica's agent sent (none, unless a setting
// stopped a worker from sending WEBHOOK_USER_AGENT).
func perReplica(hits []hit, n int) []int {
	out := make([]int, n+1)
	for _, h := range hits {
		if h.status >= 300 {
			continue
		}
		if i, ok := replicaOf(h.agent); ok && i < n {
			out[i]++
		} else {
			out[n]++
		}
	}
	return out
}
