package portalsite

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Link exchanges per client address: a browser opens the portal a few
// times a day; a script guessing tokens (2^256 of them) or replaying a
// leaked link is held to this pace.
const (
	opensPerMinute = 20
	opensBurst     = 20
	// maxTracked bounds the addresses remembered; past it, those idle
	// for a minute are forgotten (their bucket would be full again).
	maxTracked = 10000
)

// openLimiter is the per-address pace of /portal/open. It counts the
// address the connection came from: behind a proxy that is the proxy's,
// shared by everyone behind it (docs/OPERATIONS.md, The tenant portal).
type openLimiter struct {
	mu      sync.Mutex
	clients map[string]*client
}

type client struct {
	l    *rate.Limiter
	seen time.Time
}

func newOpenLimiter() *openLimiter { return &openLimiter{clients: map[string]*client{}} }

// allow reports whether r's address may open a link at now, and if not,
// how long until it may.
func (o *openLimiter) allow(r *http.Request, now time.Time) (bool, time.Duration) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.clients[host]
	if !ok {
		if len(o.clients) >= maxTracked {
			for h, old := range o.clients {
				if now.Sub(old.seen) > time.Minute {
					delete(o.clients, h)
				}
			}
		}
		c = &client{l: rate.NewLimiter(rate.Limit(opensPerMinute)/60, opensBurst)}
		o.clients[host] = c
	}
	c.seen = now
	res := c.l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// tooMany answers a client over its pace.
func (p *Portal) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	p.logger.Warn("portal: link exchanges over the pace of one address were refused", "remote", r.RemoteAddr)
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
	p.closed(w, http.StatusTooManyRequests, "Too many attempts to open the portal from this address. Wait a minute, then open it again from the application.")
}
