package portal

import (
	"fmt"
	"net/url"
	"time"

	"github.com/postbox/postbox/internal/operator/portaltoken"
	"github.com/postbox/postbox/webhook"
)

// DefaultLinkTTL is how long a link is valid when Link is given no ttl:
// long enough for a redirect, short enough that a link in a log or a
// browser history is of no use to anyone.
const DefaultLinkTTL = 10 * time.Minute

// MaxLinkTTL bounds a link's validity.
const MaxLinkTTL = 24 * time.Hour

// OpenPath is where the portal exchanges a link for a session.
const OpenPath = "/portal/open"

// Link mints a link that opens the portal for tenant, valid for ttl (zero:
// DefaultLinkTTL) and exchanged at most once. key is the current
// PORTAL_SIGNING_KEY (the first of the list), at least 32 bytes.
//
// The result is a path and query ("/portal/open?token=…"): put postbox's
// own address in front of it (https://hooks.example.com/portal/open?…).
// It is a credential until it is used or expires; redirect the browser to
// it rather than logging it.
func Link(key []byte, tenant string, ttl time.Duration) (string, error) {
	if _, err := webhook.ForTenant(tenant); err != nil {
		return "", fmt.Errorf("portal: link: %w", err)
	}
	switch {
	case ttl == 0:
		ttl = DefaultLinkTTL
	case ttl < 0 || ttl > MaxLinkTTL:
		return "", fmt.Errorf("portal: link ttl %s must be in (0, %s]", ttl, MaxLinkTTL)
	}
	token, err := portaltoken.Sign(key, portaltoken.PurposeLink, portaltoken.Claims{
		Tenant: tenant, Nonce: portaltoken.NewNonce(), Expires: time.Now().Add(ttl).Unix(),
	})
	if err != nil {
		return "", err
	}
	return OpenPath + "?token=" + url.QueryEscape(token), nil
}
