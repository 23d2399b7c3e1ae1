package soak

import (
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/webhook"
)

// holdPast is how long a "timing out" receiver holds a request: past the
// sender's whole delivery budget, so the sender always gives up first. It
// then answers 503, which nobody reads; a hold also ends when the sender
// hangs up.
const holdPast = leases.DeliveryBudget + 2*time.Second

// receiver is one webhook endpoint's far end on 127.0.0.1. It verifies
// every request's Standard Webhooks signature with the reference library,
// misbehaves per Faults, and records when it accepted (answered 2xx) each
// event id.
type receiver struct {
	faults   Faults
	verifier *standardwebhooks.Webhook
	secret   string
	server   *http.Server
	ln       net.Listener
	served   chan struct{}
	closing  chan struct{}
	closed   sync.Once

	mu       sync.Mutex
	rng      *rand.Rand
	accepted map[string][]time.Time // webhook-id (event id) → acceptance times
	requests int
	errors   int // answered 500
	held     int // held past the budget
	badSigs  int
}

func startReceiver(f Faults, seed uint64) (*receiver, error) {
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{
		faults:   f,
		verifier: v,
		secret:   secret,
		ln:       ln,
		served:   make(chan struct{}),
		closing:  make(chan struct{}),
		rng:      rand.New(rand.NewPCG(seed, 0x686f6f6b)),
		accepted: map[string][]time.Time{},
	}
	r.server = &http.Server{
		Handler:           http.HandlerFunc(r.serve),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       time.Minute,
	}
	go func() {
		defer close(r.served)
		_ = r.server.Serve(ln)
	}()
	return r, nil
}

// URL is what the endpoint is created with.
func (r *receiver) URL() string { return "http://" + r.ln.Addr().String() + "/hook" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.verifier.Verify(body, req.Header) != nil {
		r.mu.Lock()
		r.requests++
		r.badSigs++
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.HeaderID)

	r.mu.Lock()
	r.requests++
	draw := r.rng.Float64()
	switch {
	case draw < r.faults.WebhookTimeout:
		r.held++
		r.mu.Unlock()
		timer := time.NewTimer(holdPast)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-req.Context().Done():
		case <-r.closing:
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case draw < r.faults.WebhookTimeout+r.faults.WebhookError:
		r.errors++
		r.mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	// Accepted: recorded before the answer leaves, so a sender that dies
	// after sending cannot make a delivery the receiver does not count.
	// ReplyDelay is the window in which it can die after that.
	r.accepted[id] = append(r.accepted[id], time.Now())
	r.mu.Unlock()
	time.Sleep(r.faults.ReplyDelay)
	w.WriteHeader(http.StatusNoContent)
}

type receiverCounts struct {
	Requests, Accepted, Errors, Held, BadSignatures int
}

func (r *receiver) counts() receiverCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := receiverCounts{Requests: r.requests, Errors: r.errors, Held: r.held, BadSignatures: r.badSigs}
	for _, ts := range r.accepted {
		c.Accepted += len(ts)
	}
	return c
}

// acceptances returns a copy of the acceptance times per event id.
func (r *receiver) acceptances() map[string][]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]time.Time, len(r.accepted))
	for id, ts := range r.accepted {
		out[id] = append([]time.Time(nil), ts...)
	}
	return out
}

// close stops the server; held requests are released at once.
func (r *receiver) close() {
	r.closed.Do(func() {
		close(r.closing)
		_ = r.server.Close()
		<-r.served
	})
}
