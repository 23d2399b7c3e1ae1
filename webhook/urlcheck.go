package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// checkEndpointURL is ValidateURL for a URL read back from a
// webhook_endpoints row, which plain SQL may have written past the Go API:
// the attempt path calls it before every request, so a URL with
// credentials, a fragment, another scheme, or http in production is never
// used. Its error names the URL only through redactURL: the query string
// and the userinfo may be tokens.
func checkEndpointURL(raw string, production bool) error {
	if err := ValidateURL(raw, production); err != nil {
		return fmt.Errorf("endpoint url %s: %w", redactURL(raw), err)
	}
	return nil
}

// RedactURL is an endpoint URL as logs, errors, the console and the CLI
// show it: the userinfo, query string and fragment, which may be tokens
// (?token=…), replaced by REDACTED; scheme, host, port and path kept.
func RedactURL(raw string) string { return redactURL(raw) }

// redactURL returns raw with whatever may be a credential replaced by
// REDACTED: the userinfo, the query string and the fragment. Scheme, host,
// port and path stay, so an operator can still tell which receiver it is.
// It works on the text, not on a parsed URL, so a URL that does not parse
// (the one most likely to end up in an error) is redacted too.
func redactURL(raw string) string {
	rest, fragment, hasFragment := strings.Cut(raw, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	if scheme, after, ok := strings.Cut(rest, "://"); ok {
		authority, path := after, ""
		if i := strings.IndexByte(after, '/'); i >= 0 {
			authority, path = after[:i], after[i:]
		}
		if i := strings.LastIndexByte(authority, '@'); i >= 0 {
			authority = "REDACTED" + authority[i:]
		}
		rest = scheme + "://" + authority + path
	}
	if hasQuery && query != "" {
		rest += "?REDACTED"
	}
	if hasFragment && fragment != "" {
		rest += "#REDACTED"
	}
	return rest
}

// noUserinfo refuses, before anything is dialled, a request whose URL
// carries userinfo. http.Client has already turned it into an
// Authorization: Basic header by the time the transport sees the request,
// so stripping is not enough; the request is refused outright, and its
// error does not quote the URL.
type noUserinfo struct{ next http.RoundTripper }

func (t noUserinfo) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL != nil && req.URL.User != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, errUserinfo
	}
	return t.next.RoundTrip(req)
}

// redactedURLError is url.Error without the URL's secrets: http.Client
// wraps every transport error in a *url.Error quoting the whole URL.
func redactedURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err}
	}
	return err
}
