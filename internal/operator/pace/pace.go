// Package pace holds callers of the portal and the HTTP API to a pace of
// their own: a token bucket per key (a client address, an API key), in the
// process. It bounds what one caller can do to a replica, not to the pool.
package pace

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxTracked bounds the keys remembered; past it, those idle for a minute
// are forgotten (their bucket would be full again by then).
const maxTracked = 10000

// PerKey is a token bucket per key: Rate a second, bursts of Burst.
type PerKey struct {
	rate  rate.Limit
	burst int

	mu   sync.Mutex
	keys map[string]*bucket
}

type bucket struct {
	l    *rate.Limiter
	seen time.Time
}

// New makes a PerKey of perSecond, bursts of burst.
func New(perSecond float64, burst int) *PerKey {
	return &PerKey{rate: rate.Limit(perSecond), burst: burst, keys: map[string]*bucket{}}
}

// Allow takes one token of key's bucket at now, or reports how long until
// one is there.
func (p *PerKey) Allow(key string, now time.Time) (ok bool, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, found := p.keys[key]
	if !found {
		if len(p.keys) >= maxTracked {
			for k, old := range p.keys {
				if now.Sub(old.seen) > time.Minute {
					delete(p.keys, k)
				}
			}
		}
		b = &bucket{l: rate.NewLimiter(p.rate, p.burst)}
		p.keys[key] = b
	}
	b.seen = now
	res := b.l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Address is the key of r's client: the address its connection came from
// (behind a reverse proxy, the proxy's).
func Address(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
