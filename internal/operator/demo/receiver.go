package demo

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// receiver is a loopback webhook receiver for the demo. It verifies
// every request's Standard Webhooks signature with the reference library
// and counts deliveries per event id, so the summary can report duplicates.
type receiver struct {
	name   string
	server *httptest.Server
	answer func(n int) int // HTTP status for the n-th request (1-based)

	mu       sync.Mutex
	verifier *standardwebhooks.Webhook
	requests int
	badSigs  int
	byEvent  map[string]int // webhook-id → 2xx answers
	statuses map[int]int
}

func newReceiver(name string, answer func(n int) int) *receiver {
	r := &receiver{name: name, answer: answer, byEvent: map[string]int{}, statuses: map[int]int{}}
	r.server = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// trust sets the secret once the endpoint exists (it is generated then).
func (r *receiver) trust(secret string) error {
	v, err := standardwebhooks.NewWebhook(secret)
	r.mu.Lock()
	r.verifier = v
	r.mu.Unlock()
	return err
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if r.verifier == nil || r.verifier.Verify(body, req.Header) != nil {
		r.badSigs++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	status := r.answer(r.requests)
	r.statuses[status]++
	if status < 300 {
		r.byEvent[req.Header.Get("webhook-id")]++
	}
	w.WriteHeader(status)
}

// tally is what the receiver saw: requests, 2xx-answered event ids,
// duplicates among them, and signatures that failed verification.
func (r *receiver) tally() (requests, events, duplicates, badSigs int, statuses map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.byEvent {
		if n > 1 {
			duplicates += n - 1
		}
	}
	statuses = map[int]int{}
	for k, v := range r.statuses {
		statuses[k] = v
	}
	return r.requests, len(r.byEvent), duplicates, r.badSigs, statuses
}

func (r *receiver) close() { r.server.Close() }
