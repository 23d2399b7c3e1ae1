package webhook

import (
	"io"
	"net"
	"net/http"
	"time"

	"github.com/postbox/postbox/internal/engine/pgtext"
)

// Response body limits. The client reads at most maxResponseRead bytes —
// enough that a typical answer is drained and its connection reused — and
// stores at most maxExcerptBytes of it in webhook_delivery_attempts (the
// table's CHECK enforces the same bound).
const (
	maxResponseRead = 64 << 10
	maxExcerptBytes = 4096
)

// newHTTPClient builds the one delivery client of a Dispatcher. One Transport
// serves every attempt, so connections to a receiver are reused across
// deliveries.
//
//   - Every connection goes through addressPolicy.control, the SSRF guard.
//   - A URL with userinfo is refused (noUserinfo): net/http would send it
//     as Authorization: Basic.
//   - No proxy: through a proxy the guard would vet the proxy's address,
//     not the receiver's.
//   - Redirects are never followed (a 3xx is the attempt's answer): a
//     redirect to an internal address is the classic way around an SSRF
//     guard, and a receiver that moved should be re-registered.
//   - No client-wide timeout: each attempt carries its own deadline,
//     DeliveryBudget or less (see attempt). The transport's timeouts are
//     backstops inside it.
func newHTTPClient(cfg Settings, budget time.Duration) *http.Client {
	dialer := &net.Dialer{
		Timeout:   budget,
		KeepAlive: 30 * time.Second,
		Control:   addressPolicy{allowed: cfg.AllowedCIDRs}.control,
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * cfg.Concurrency,
		MaxIdleConnsPerHost:   cfg.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   budget,
		ResponseHeaderTimeout: budget,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: noUserinfo{transport},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// readExcerpt reads at most maxResponseRead bytes of body and returns the
// excerpt to store. It drains what it reads so a small answer's connection
// goes back to the pool; a larger one is closed by the caller's Close.
func readExcerpt(body io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(body, maxResponseRead))
	return excerpt(b), err
}

// excerpt makes b storable in a text column (see pgtext.Clean), at most
// maxExcerptBytes.
func excerpt(b []byte) string {
	s, _ := pgtext.Clean(string(b), maxExcerptBytes)
	return s
}
