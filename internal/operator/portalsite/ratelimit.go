package portalsite

import (
	"net/http"
	"strconv"
	"time"

	"github.com/postbox/postbox/internal/operator/pace"
)

// Link exchanges per client address: a browser opens the portal a few
// times a day; a script guessing tokens (2^256 of them) or replaying a
// leaked link is held to this pace.
const (
	opensPerMinute = 20
	opensBurst     = 20
)

func newOpenLimiter() *pace.PerKey { return pace.New(opensPerMinute/60.0, opensBurst) }

// tooMany answers a client over its pace.
func (p *Portal) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	p.logger.Warn("portal: link exchanges over the pace of one address were refused", "remote", r.RemoteAddr)
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
	p.closed(w, http.StatusTooManyRequests, "Too many attempts to open the portal from this address. Wait a minute, then open it again from the application.")
}
