package portalsite

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/operator/htmlpage"
	"github.com/postbox/postbox/internal/operator/pace"
	"github.com/postbox/postbox/internal/operator/portaltoken"
	"github.com/postbox/postbox/webhook"
)

//go:embed templates/*.html
var templateFS embed.FS

// DefaultSessionTTL is how long a portal session lasts when Config gives
// none.
const DefaultSessionTTL = time.Hour

// Prefix is where the portal is served; package portal's links point
// under it.
const Prefix = "/portal"

// Settings are the portal's settings from the environment
// (SettingsFromEnv): what an operator configures.
type Settings struct {
	// Keys are PORTAL_SIGNING_KEY's, newest first: the first signs
	// sessions and is the only one that opens them (a rotation ends every
	// session); every one opens links, for a rotation's overlap. None: no
	// portal.
	Keys       [][]byte
	SessionTTL time.Duration // PORTAL_SESSION_TTL; zero: DefaultSessionTTL
	// FrameAncestors are the origins that may frame the portal (the
	// application's own pages), as CSP frame-ancestors sources
	// (PORTAL_FRAME_ANCESTORS); none: no one may.
	FrameAncestors []string
	// BrandColor is the header's colour, "#rrggbb" (PORTAL_BRAND_COLOR);
	// empty: postbox's.
	BrandColor string
	// LogoURL is an https image shown in the header (PORTAL_LOGO_URL);
	// empty: none.
	LogoURL string
}

// Bounds of a session's lifetime.
const (
	MinSessionTTL = time.Minute
	MaxSessionTTL = 24 * time.Hour
)

// SettingsFromEnv reads the PORTAL_* variables through lookup.
func SettingsFromEnv(lookup func(string) (string, bool)) (Settings, error) {
	var s Settings
	if v, ok := lookup("PORTAL_SIGNING_KEY"); ok && v != "" {
		keys, err := portaltoken.ParseKeys(v)
		if err != nil {
			return s, fmt.Errorf("PORTAL_SIGNING_KEY: %w", err)
		}
		s.Keys = keys
	}
	if v, ok := lookup("PORTAL_SESSION_TTL"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < MinSessionTTL || d > MaxSessionTTL {
			return s, fmt.Errorf("PORTAL_SESSION_TTL=%q: want a duration from %s to %s", v, MinSessionTTL, MaxSessionTTL)
		}
		s.SessionTTL = d
	}
	if v, ok := lookup("PORTAL_FRAME_ANCESTORS"); ok {
		s.FrameAncestors = strings.Fields(v)
	}
	s.BrandColor, _ = lookup("PORTAL_BRAND_COLOR")
	s.LogoURL, _ = lookup("PORTAL_LOGO_URL")
	if _, err := s.csp(); err != nil {
		return s, err
	}
	return s, nil
}

// csp checks the settings a page is built from and returns its
// Content-Security-Policy, naming the variable of a bad value.
func (s Settings) csp() (string, error) {
	for i, k := range s.Keys {
		if len(k) < portaltoken.MinKeyBytes {
			return "", fmt.Errorf("PORTAL_SIGNING_KEY: key %d is %d bytes; want at least %d", i+1, len(k), portaltoken.MinKeyBytes)
		}
	}
	if s.BrandColor != "" && !brandColor.MatchString(s.BrandColor) {
		return "", fmt.Errorf("PORTAL_BRAND_COLOR=%q: want a colour as #rrggbb", s.BrandColor)
	}
	imgSrc := "data:"
	if s.LogoURL != "" {
		u, err := url.Parse(s.LogoURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || strings.ContainsAny(s.LogoURL, " ;,'\"") {
			return "", fmt.Errorf("PORTAL_LOGO_URL=%q: want an https URL of an image", s.LogoURL)
		}
		imgSrc += " https://" + u.Host
	}
	ancestors, err := frameAncestors(s.FrameAncestors)
	if err != nil {
		return "", err
	}
	return "default-src 'none'; style-src 'unsafe-inline'; img-src " + imgSrc + "; form-action 'self'; base-uri 'none'; frame-ancestors " + ancestors, nil
}

// Config configures New. DB and Settings.Keys are required.
type Config struct {
	DB       claim.DB
	Settings Settings
	// Webhook are the settings endpoints are checked against (Production:
	// https only), as the operator's are.
	Webhook webhook.Settings
	// Dispatcher makes the replays (an event, an endpoint's failures);
	// nil leaves them out.
	Dispatcher *webhook.Dispatcher
	Logger     *slog.Logger     // nil discards
	Now        func() time.Time // nil: time.Now
}

// Portal is the portal's http.Handler.
type Portal struct {
	db         claim.DB
	keys       [][]byte
	csrfKey    []byte
	settings   webhook.Settings
	dispatcher *webhook.Dispatcher
	sessionTTL time.Duration
	csp        string
	brand      string
	logo       string
	logger     *slog.Logger
	now        func() time.Time
	pages      *htmlpage.Set
	mux        *http.ServeMux
	opens      *pace.PerKey
}

var brandColor = regexp.MustCompile(`^#[0-9a-fA-F]{6}$`)

// New builds the portal, refusing a configuration it could not serve
// safely with an error naming the setting.
func New(cfg Config) (*Portal, error) {
	if cfg.DB == nil {
		return nil, errors.New("portal: Config.DB is required")
	}
	if len(cfg.Settings.Keys) == 0 {
		return nil, errors.New("portal: PORTAL_SIGNING_KEY is required")
	}
	csp, err := cfg.Settings.csp()
	if err != nil {
		return nil, fmt.Errorf("portal: %w", err)
	}
	st := cfg.Settings
	p := &Portal{db: cfg.DB, keys: st.Keys, settings: cfg.Webhook, dispatcher: cfg.Dispatcher, sessionTTL: st.SessionTTL, csp: csp,
		brand: st.BrandColor, logo: st.LogoURL, logger: cfg.Logger, now: cfg.Now, opens: newOpenLimiter()}
	if p.sessionTTL <= 0 {
		p.sessionTTL = DefaultSessionTTL
	}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	p.logger = p.logger.With("component", "portal")
	if p.now == nil {
		p.now = time.Now
	}
	if p.brand == "" {
		p.brand = "#24292f"
	}
	// The CSRF key is derived from the session key: one secret to
	// configure, and rotating it ends open forms with their sessions.
	p.csrfKey = []byte(portaltoken.Derive(st.Keys[0], "csrf"))
	if err := p.parseTemplates(); err != nil {
		return nil, err
	}
	p.routes()
	return p, nil
}

// frameAncestors is the CSP frame-ancestors value for the configured
// origins: each an http(s) origin with no path ('self' allowed), since a
// source list is all CSP takes and anything else is a mistake to report.
func frameAncestors(origins []string) (string, error) {
	if len(origins) == 0 {
		return "'none'", nil
	}
	out := make([]string, 0, len(origins))
	for _, o := range origins {
		if o == "'self'" {
			out = append(out, o)
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
			u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.ContainsAny(o, " ;,'\"") {
			return "", fmt.Errorf("PORTAL_FRAME_ANCESTORS: %q is not an origin (want e.g. https://app.example.com)", o)
		}
		out = append(out, u.Scheme+"://"+u.Host)
	}
	return strings.Join(out, " "), nil
}

// pages are the templates, each parsed with the layout.
var pages = []string{"endpoints", "endpoint", "secret", "deliveries", "delivery", "eventtypes", "closed", "problem"}

func (p *Portal) parseTemplates() error {
	funcs := template.FuncMap{"redact": webhook.RedactURL, "ts": htmlpage.Timestamp, "join": strings.Join, "indent": indent,
		"dur":  func(d time.Duration) string { return d.Round(time.Millisecond).String() },
		"pct":  func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
		"list": func(v ...string) []string { return v }}
	var err error
	p.pages, err = htmlpage.Parse("portal", templateFS, funcs, p.logger, pages...)
	return err
}

// Route is one of the portal's pages or forms.
type Route struct {
	Pattern string // a net/http pattern: method and path
	handle  func(p *Portal) http.HandlerFunc
}

// Routes are every page and form of the portal; {id} is an endpoint's.
// Tests walk this list, so a route added here is tested with another
// tenant's ids without being named.
var Routes = []Route{
	{"GET " + Prefix + "/open", func(p *Portal) http.HandlerFunc { return p.open }},
	{"GET " + Prefix + "/{$}", func(p *Portal) http.HandlerFunc { return p.signedIn(p.endpoints) }},
	{"POST " + Prefix + "/endpoints", func(p *Portal) http.HandlerFunc { return p.signedIn(p.create) }},
	{"GET " + Prefix + "/endpoints/{id}", func(p *Portal) http.HandlerFunc { return p.signedIn(p.endpoint) }},
	{"POST " + Prefix + "/endpoints/{id}", func(p *Portal) http.HandlerFunc { return p.signedIn(p.update) }},
	{"POST " + Prefix + "/endpoints/{id}/{action}", func(p *Portal) http.HandlerFunc { return p.signedIn(p.act) }},
	{"GET " + Prefix + "/deliveries", func(p *Portal) http.HandlerFunc { return p.signedIn(p.deliveries) }},
	{"GET " + Prefix + "/deliveries/{id}", func(p *Portal) http.HandlerFunc { return p.signedIn(p.delivery) }},
	{"POST " + Prefix + "/events/{id}/replay", func(p *Portal) http.HandlerFunc { return p.signedIn(p.replayEvent) }},
	{"GET " + Prefix + "/event-types", func(p *Portal) http.HandlerFunc { return p.signedIn(p.eventTypes) }},
}

// Actions are the values of {action} in an endpoint's buttons.
var Actions = []string{"disable", "enable", "delete", "reveal-secret", "rotate-secret", "recover", "send-test"}

func (p *Portal) routes() {
	m := http.NewServeMux()
	for _, rt := range Routes {
		m.HandleFunc(rt.Pattern, rt.handle(p))
	}
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		p.problem(w, r, nil, http.StatusNotFound, "No such page.")
	})
	p.mux = m
}

// ServeHTTP serves the portal under /portal/.
func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No script at all; styles inline; framed only where configured.
	h.Set("Content-Security-Policy", p.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	// A link's token is in the URL of /portal/open: no page passes its
	// address on.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	p.mux.ServeHTTP(w, r)
}

// view is what every page template gets.
type view struct {
	Title  string
	Prefix string
	Brand  template.CSS // checked by New: #rrggbb
	Logo   string
	Tenant string // empty on the pages before a session
	CSRF   string
	Flash  string
	Data   any
}

func (p *Portal) render(w http.ResponseWriter, s *session, status int, page, title, flash string, data any) {
	v := view{Title: title, Prefix: Prefix, Brand: template.CSS(p.brand), Logo: p.logo, Flash: flash, Data: data}
	if s != nil {
		v.Tenant, v.CSRF = s.tenant, p.csrfToken(s)
	}
	p.pages.Render(w, status, page, v)
}

// problem renders an error page: bad input, nothing found, a refusal.
func (p *Portal) problem(w http.ResponseWriter, _ *http.Request, s *session, status int, msg string) {
	p.render(w, s, status, "problem", http.StatusText(status), "", msg)
}
