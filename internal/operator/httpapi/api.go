package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/operator/pace"
	"github.com/postbox/postbox/internal/operator/portaltoken"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// Prefix is where the API is served.
const Prefix = "/api/v1"

// Settings are the API's settings from the environment (SettingsFromEnv).
type Settings struct {
	Keys []Key // API_KEYS; none: the API is off
	// RateLimit is the requests a second one application key or tenant
	// may make (API_RATE_LIMIT), bursts of twice as many; 0: no limit.
	RateLimit float64
}

// DefaultRateLimit is API_RATE_LIMIT's default.
const DefaultRateLimit = 1000

// SettingsFromEnv reads API_KEYS and API_RATE_LIMIT through lookup.
func SettingsFromEnv(lookup func(string) (string, bool)) (Settings, error) {
	s := Settings{RateLimit: DefaultRateLimit}
	if v, ok := lookup("API_KEYS"); ok && v != "" {
		keys, err := ParseKeys(v)
		if err != nil {
			return s, err
		}
		s.Keys = keys
	}
	if v, ok := lookup("API_RATE_LIMIT"); ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1e6 {
			return s, fmt.Errorf("API_RATE_LIMIT=%q: want requests a second from 0 (no limit) to 1000000", v)
		}
		s.RateLimit = f
	}
	return s, nil
}

// Config configures New. DB and Settings.Keys are required.
type Config struct {
	DB       claim.DB
	Settings Settings
	// PortalKeys are PORTAL_SIGNING_KEY's: they sign tenant tokens and
	// portal links. None: those routes answer 404, and only application
	// keys are accepted.
	PortalKeys [][]byte
	// Emails enqueues emails (its Keys seal their secret fields, as the
	// application's own Enqueue would); nil: the zero Enqueuer.
	Emails *outbox.Enqueuer
	// Webhook are the settings events and endpoints are checked against.
	Webhook webhook.Settings
	// Dispatcher makes replays; nil leaves them out (404).
	Dispatcher *webhook.Dispatcher
	Logger     *slog.Logger     // nil discards
	Now        func() time.Time // nil: time.Now
}

// API is the API's http.Handler.
type API struct {
	db         claim.DB
	keys       []Key
	portalKeys [][]byte
	emails     *outbox.Enqueuer
	webhook    webhook.Settings
	dispatcher *webhook.Dispatcher
	logger     *slog.Logger
	now        func() time.Time
	mux        *http.ServeMux
	perCaller  *pace.PerKey // nil: no limit
	failures   *pace.PerKey // failed authentications per address
	bodyLimit  int64
	groups     *groupCommitter // the enqueues' commits
}

// New builds the API.
func New(cfg Config) (*API, error) {
	if cfg.DB == nil {
		return nil, errors.New("api: Config.DB is required")
	}
	if len(cfg.Settings.Keys) == 0 {
		return nil, errors.New("api: API_KEYS is required")
	}
	a := &API{db: cfg.DB, keys: cfg.Settings.Keys, portalKeys: cfg.PortalKeys, emails: cfg.Emails, webhook: cfg.Webhook,
		dispatcher: cfg.Dispatcher, logger: cfg.Logger, now: cfg.Now, groups: newGroupCommitter(cfg.DB), failures: pace.New(authFailuresPerMinute/60.0, authFailuresPerMinute)}
	if a.emails == nil {
		a.emails = &outbox.Enqueuer{}
	}
	if a.logger == nil {
		a.logger = slog.New(slog.DiscardHandler)
	}
	a.logger = a.logger.With("component", "api")
	if a.now == nil {
		a.now = time.Now
	}
	if r := cfg.Settings.RateLimit; r > 0 {
		a.perCaller = pace.New(r, int(2*r)+1)
	}
	// The largest body is an email with its PDF, base64 in JSON (4/3),
	// or an event's payload, with room for the rest of the request.
	limit := max(a.emailLimit(), a.webhook.MaxPayloadBytes, webhook.DefaultMaxPayloadBytes)
	a.bodyLimit = int64(limit)*4/3 + 64<<10
	a.routes()
	return a, nil
}

func (a *API) emailLimit() int {
	if a.emails.MaxPayloadBytes > 0 {
		return a.emails.MaxPayloadBytes
	}
	return outbox.DefaultMaxPayloadBytes
}

// authFailuresPerMinute bounds the requests with a bad key or token one
// address may make: guessing a 256-bit key is hopeless, but each guess
// costs a hash and a log line.
const authFailuresPerMinute = 30

// requestTimeout bounds a request's statements; a replay, which also
// makes its first attempts, has replayTimeout.
const (
	requestTimeout = 10 * time.Second
	replayTimeout  = 2 * time.Minute
)

// ServeHTTP serves the API under /api/v1/.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	a.mux.ServeHTTP(w, r)
}

// problem is an RFC 9457 problem document.
type problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Errors []fieldError `json:"errors,omitempty"`
}

// fieldError names one bad field of a request, by its JSON path.
type fieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// fail writes a problem document.
func fail(w http.ResponseWriter, status int, detail string, fields ...fieldError) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Errors: fields})
}

// reply writes v as JSON with status.
func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errBody is a request body that could not be read; decode has answered.
var errBody = errors.New("bad request body")

// decode reads r's JSON body into v: application/json, at most the body
// limit, every field known. A problem is answered, naming what is wrong
// (the field, or the byte offset of malformed JSON), and errBody returned.
func (a *API) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		fail(w, http.StatusUnsupportedMediaType, "the body must be JSON, sent with Content-Type: application/json")
		return errBody
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, a.bodyLimit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("trailing data after the JSON document")
		}
	}
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var invalid *outbox.ValidationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &invalid):
		// A field's own decoder refused its value (an email's priority).
		fail(w, http.StatusBadRequest, invalid.Error(), fieldError{Field: invalid.Field, Detail: invalid.Problem})
	case errors.As(err, &tooLarge):
		fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", a.bodyLimit))
	case errors.As(err, &syntax):
		fail(w, http.StatusBadRequest, fmt.Sprintf("malformed JSON at byte offset %d: %v", syntax.Offset, syntax))
	case errors.As(err, &typ):
		fail(w, http.StatusBadRequest, fmt.Sprintf("%s: want %s (at byte offset %d)", typ.Field, typ.Type, typ.Offset),
			fieldError{Field: typ.Field, Detail: "want " + typ.Type.String()})
	case errors.Is(err, io.EOF):
		fail(w, http.StatusBadRequest, "the body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		fail(w, http.StatusBadRequest, "malformed JSON: the body ends inside the document")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		fail(w, http.StatusBadRequest, fmt.Sprintf("unknown field %q", name), fieldError{Field: name, Detail: "is not a field of this request"})
	default:
		fail(w, http.StatusBadRequest, "the body is not a JSON object of this request: "+err.Error())
	}
	return errBody
}

// caller is who made a request: an application key, or a tenant (a
// tenant token, or an application key acting as one).
type caller struct {
	key     string // the application key's name; "" for a tenant token
	session string // names the caller in the audit log
	scope   *webhook.TenantScope
}

// authenticate reads the bearer credential: an application key or a
// tenant token (the route decides which it takes). Without a valid one it
// answers 401 — 429 once the address has failed too often — and returns
// nil. A valid credential is never held back by failures from its address.
func (a *API) authenticate(w http.ResponseWriter, r *http.Request) *caller {
	if c := a.credential(r); c != nil {
		return c
	}
	if ok, wait := a.failures.Allow(pace.Address(r), a.now()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		fail(w, http.StatusTooManyRequests, "too many requests with a bad key or token from this address")
		return nil
	}
	a.logger.Warn("api: a request without a valid key or token was refused", "remote", r.RemoteAddr, "path", r.URL.Path)
	w.Header().Set("WWW-Authenticate", `Bearer realm="postbox"`)
	fail(w, http.StatusUnauthorized, "send Authorization: Bearer <application key> (or a tenant token where a tenant may call)")
	return nil
}

// credential is r's caller, or nil.
func (a *API) credential(r *http.Request) *caller {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return nil
	}
	if k := match(a.keys, token); k != nil {
		return &caller{key: k.Name, session: "api-key:" + k.Name}
	}
	if len(a.portalKeys) == 0 || !strings.HasPrefix(token, "v1.") {
		return nil
	}
	// A tenant token is a portal session's signed claims: only the current
	// key opens one, so rotating the key ends them with the sessions.
	c, err := portaltoken.Open(a.portalKeys[:1], portaltoken.PurposeSession, token, a.now())
	if err != nil {
		return nil
	}
	scope, err := webhook.ForTenant(c.Tenant)
	if err != nil {
		return nil
	}
	return &caller{session: c.Nonce, scope: &scope}
}

// paced answers 429 for a caller over its pace.
func (a *API) paced(w http.ResponseWriter, c *caller) bool {
	if a.perCaller == nil {
		return true
	}
	key := c.session
	if c.key == "" && c.scope != nil {
		key = "tenant:" + c.scope.Tenant()
	}
	if ok, wait := a.perCaller.Allow(key, a.now()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		fail(w, http.StatusTooManyRequests, "over API_RATE_LIMIT for this key or tenant")
		return false
	}
	return true
}

// ctx is a request's context bounded by d.
func bounded(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
