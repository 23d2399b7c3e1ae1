package portalsite

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/operator/csrf"
	"github.com/postbox/postbox/internal/operator/pace"
	"github.com/postbox/postbox/internal/operator/portalaudit"
	"github.com/postbox/postbox/internal/operator/portaltoken"
	"github.com/postbox/postbox/webhook"
)

// sessionCookie holds a signed session: the tenant, the session's id and
// its expiry (portaltoken.Claims).
const sessionCookie = "postbox_portal"

// session is a signed-in browser: one tenant's, for one session.
type session struct {
	tenant string
	id     string // names the session in the audit log and binds its CSRF tokens
	scope  webhook.TenantScope
}

// closed answers a link or session that opens nothing, saying which in
// plain words and nothing more.
func (p *Portal) closed(w http.ResponseWriter, status int, msg string) {
	p.render(w, nil, status, "closed", "The portal is closed", "", msg)
}

// open exchanges a link for a session: checks its signature (any of the
// keys, for a rotation's overlap) and expiry, spends it — a link opens
// once — and sets the session cookie, then sends the browser to the
// portal's first page, out of the link's URL.
func (p *Portal) open(w http.ResponseWriter, r *http.Request) {
	if ok, wait := p.opens.Allow(pace.Address(r), p.now()); !ok {
		p.tooMany(w, r, wait)
		return
	}
	c, err := portaltoken.Open(p.keys, portaltoken.PurposeLink, r.URL.Query().Get("token"), p.now())
	switch {
	case errors.Is(err, portaltoken.ErrExpired):
		p.logger.Info("portal: an expired link was refused", "remote", r.RemoteAddr)
		p.closed(w, http.StatusForbidden, "This link has expired. Open the portal again from the application.")
		return
	case err != nil:
		p.logger.Warn("portal: an invalid link was refused", "remote", r.RemoteAddr)
		p.closed(w, http.StatusForbidden, "This link is not valid. Open the portal again from the application.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	s := &session{tenant: c.Tenant, id: portaltoken.NewNonce()}
	spent := false
	err = pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO portal_link_uses (nonce, tenant_id, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (nonce) DO NOTHING`, c.Nonce, c.Tenant, c.ExpiresAt())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			spent = true
			return nil
		}
		// A few expired uses go with each exchange: the table keeps
		// about one link lifetime of them.
		if _, err := tx.Exec(ctx, `DELETE FROM portal_link_uses WHERE nonce IN (
	SELECT nonce FROM portal_link_uses WHERE expires_at < now() ORDER BY expires_at LIMIT 100)`); err != nil {
			return err
		}
		return portalaudit.Write(ctx, tx, s.entry("session.open"))
	})
	switch {
	case err != nil:
		p.logger.Error("portal: exchanging a link failed", "tenant", c.Tenant, "error", err.Error())
		p.closed(w, http.StatusServiceUnavailable, "The portal could not open just now. Try again in a moment.")
		return
	case spent:
		p.logger.Warn("portal: a used link was refused", "tenant", c.Tenant, "remote", r.RemoteAddr)
		p.closed(w, http.StatusForbidden, "This link has already been used. Open the portal again from the application.")
		return
	}
	expires := p.now().Add(p.sessionTTL)
	value, err := portaltoken.Sign(p.keys[0], portaltoken.PurposeSession, portaltoken.Claims{Tenant: s.tenant, Nonce: s.id, Expires: expires.Unix()})
	if err != nil {
		p.closed(w, http.StatusInternalServerError, "The portal could not open.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: Prefix + "/", Expires: expires,
		MaxAge: int(p.sessionTTL / time.Second), HttpOnly: true, Secure: !plainLoopback(r), SameSite: http.SameSiteStrictMode})
	p.logger.Info("portal: session opened", "tenant", s.tenant, "session", s.id)
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

// plainLoopback is a request over plain HTTP from this machine: a
// developer's browser, where a Secure cookie would never come back. Any
// other request's cookie is Secure (behind a proxy that ends TLS, the
// browser still speaks https).
func plainLoopback(r *http.Request) bool {
	if r.TLS != nil {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// signedIn serves h to a browser with a valid session (signed with the
// current key, not expired), and a page saying the session has ended to
// any other. A POST must also carry the session's CSRF token.
func (p *Portal) signedIn(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(sessionCookie)
		if err != nil {
			p.closed(w, http.StatusUnauthorized, "You are not signed in to the portal. Open it from the application.")
			return
		}
		// Only the current key opens a session: rotating the key ends
		// every session at once.
		c, err := portaltoken.Open(p.keys[:1], portaltoken.PurposeSession, ck.Value, p.now())
		if err != nil {
			p.closed(w, http.StatusUnauthorized, "Your portal session has ended. Open the portal again from the application.")
			return
		}
		scope, err := webhook.ForTenant(c.Tenant)
		if err != nil {
			p.closed(w, http.StatusUnauthorized, "Your portal session has ended. Open the portal again from the application.")
			return
		}
		s := &session{tenant: c.Tenant, id: c.Nonce, scope: scope}
		if r.Method == http.MethodPost && !csrf.Valid(p.csrfKey, s.id, s.tenant, r.PostFormValue(csrf.Field)) {
			p.logger.Warn("portal: a form without its session's CSRF token was refused", "tenant", s.tenant, "session", s.id, "path", r.URL.Path)
			p.problem(w, r, s, http.StatusForbidden, "Refused: this form did not come from your portal page. Nothing was changed. Reload the page and try again.")
			return
		}
		h(w, r, s)
	}
}

// csrfToken is the token the session's forms carry.
func (p *Portal) csrfToken(s *session) string { return csrf.Token(p.csrfKey, s.id, s.tenant) }

// entry is the audit record of the session's action.
func (s *session) entry(action string) portalaudit.Entry {
	return portalaudit.Entry{Tenant: s.tenant, Session: s.id, Action: action}
}

// requestTimeout bounds the statements of one page.
const requestTimeout = 10 * time.Second
