package mailevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/outbox"
)

// DefaultMaxBodyBytes caps a request body: a provider's event is a few
// kilobytes, a bounce with its content a few hundred.
const DefaultMaxBodyBytes = 1 << 20

// DefaultRecordTimeout bounds the database work of one request.
const DefaultRecordTimeout = 10 * time.Second

// Config configures a Handler. DB is required.
type Config struct {
	DB       outbox.DB
	Settings Settings

	// Metrics counts the recorded events (postbox_email_events_total and
	// the orphan and suppression series); nil counts nothing.
	Metrics *outbox.Metrics
	// Registerer, if set, receives postbox_email_event_requests_total.
	Registerer prometheus.Registerer
	// Logger: nil means slog.Default().
	Logger *slog.Logger

	// SNS is how the SES endpoint fetches signing certificates and
	// confirms subscriptions.
	SNS SNSOptions

	// MaxBodyBytes: 0 means DefaultMaxBodyBytes. RecordTimeout: 0 means
	// DefaultRecordTimeout.
	MaxBodyBytes  int64
	RecordTimeout time.Duration
}

// Handler serves the ingestion endpoints under /events/.
type Handler struct {
	cfg      Config
	log      *slog.Logger
	mux      *http.ServeMux
	sns      *snsVerifier
	generic  *genericVerifier
	requests *prometheus.CounterVec
}

// New returns the endpoints' Handler. Mount it at /events/.
func New(cfg Config) (*Handler, error) {
	if cfg.DB == nil {
		return nil, errors.New("mailevents: Config.DB is required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.RecordTimeout <= 0 {
		cfg.RecordTimeout = DefaultRecordTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, log: cfg.Logger.With("component", "mailevents"), mux: http.NewServeMux()}
	h.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "postbox_email_event_requests_total",
		Help: "Requests to the delivery-event endpoints, by provider and HTTP status.",
	}, []string{"provider", "code"})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(h.requests)
	}
	if cfg.Settings.GenericSecret != "" {
		v, err := newGenericVerifier(cfg.Settings.GenericSecret)
		if err != nil {
			return nil, fmt.Errorf("mailevents: %s: %w", EnvGenericSecret, err)
		}
		h.generic = v
	}
	h.sns = newSNSVerifier(cfg.SNS)
	for _, ep := range []endpoint{h.postmark(), h.ses(), h.genericEndpoint()} {
		if !ep.enabled {
			h.log.Info("delivery-event endpoint not configured; it answers 404", "provider", ep.provider)
		}
		h.mux.Handle("POST /events/"+ep.provider, h.serve(ep))
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// endpoint is one provider's way in: how it authenticates (before the body
// is read, when it can), and how a body becomes events (verifying a
// signature first, when the body carries one).
type endpoint struct {
	provider string
	enabled  bool
	auth     func(r *http.Request) *reject
	events   func(ctx context.Context, r *http.Request, body []byte) ([]outbox.Event, *reject)
}

// reject is a refused request: its status and a short reason that names
// no credential and quotes no body.
type reject struct {
	code   int
	reason string
}

func rejectf(code int, format string, a ...any) *reject {
	return &reject{code: code, reason: fmt.Sprintf(format, a...)}
}

// answer is the body of a 200.
type answer struct {
	Recorded   int `json:"recorded"`
	Duplicates int `json:"duplicates"`
	Orphans    int `json:"orphans"`
	Mismatches int `json:"mismatches"`
}

func (h *Handler) serve(ep endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := h.handle(ep, w, r)
		h.requests.WithLabelValues(ep.provider, fmt.Sprint(code)).Inc()
	})
}

func (h *Handler) handle(ep endpoint, w http.ResponseWriter, r *http.Request) int {
	fail := func(rj *reject) int {
		level := slog.LevelInfo
		if rj.code >= 500 {
			level = slog.LevelError
		}
		h.log.Log(r.Context(), level, "delivery-event request refused", "provider", ep.provider, "status", rj.code, "reason", rj.reason)
		if rj.code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Basic realm="postbox delivery events", charset="UTF-8"`)
		}
		http.Error(w, rj.reason, rj.code)
		return rj.code
	}
	if !ep.enabled {
		return fail(rejectf(http.StatusNotFound, "the %s endpoint is not configured", ep.provider))
	}
	if ep.auth != nil {
		if rj := ep.auth(r); rj != nil {
			return fail(rj)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return fail(rejectf(http.StatusRequestEntityTooLarge, "body over %d bytes", h.cfg.MaxBodyBytes))
		}
		return fail(rejectf(http.StatusBadRequest, "reading the body: %v", err))
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RecordTimeout)
	defer cancel()
	events, rj := ep.events(ctx, r, body)
	if rj != nil {
		return fail(rj)
	}
	// Every event is checked before any is recorded: a body with one bad
	// event writes nothing.
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return fail(rejectf(http.StatusBadRequest, "%v", err))
		}
	}
	var a answer
	for _, e := range events {
		rec, err := outbox.RecordEvent(ctx, h.cfg.DB, e, h.cfg.Settings.Policy)
		if err != nil {
			// Those recorded so far stay: the provider's retry finds them
			// duplicates and records the rest. The database's error is
			// logged, not answered.
			h.log.Error("recording a delivery event failed", "provider", ep.provider, "error", err.Error())
			return fail(rejectf(http.StatusInternalServerError, "recording the event failed; retry"))
		}
		h.cfg.Metrics.CountEvent(rec)
		switch {
		case rec.Duplicate:
			a.Duplicates++
		case rec.Event.Orphan():
			a.Orphans++
			a.Recorded++
			h.log.Warn("delivery event for an unknown row stored as an orphan",
				"provider", ep.provider, "type", string(rec.Event.Type), "ref", rec.Event.Ref, "event_id", rec.Event.ID)
		case rec.Mismatch:
			a.Mismatches++
			a.Recorded++
			h.log.Warn("delivery event about another recipient than its row's: stored, suppresses nothing",
				"provider", ep.provider, "type", string(rec.Event.Type), "row_id", rec.Event.RowID, "event_id", rec.Event.ID)
		default:
			a.Recorded++
		}
		if rec.OrphanHeld {
			h.log.Warn("orphan delivery event did not suppress its recipient", "provider", ep.provider,
				"event_id", rec.Event.ID, "why", "EVENTS_SUPPRESS_ORPHANS is off, or its hourly bound is reached")
		}
		if s := rec.Suppressed; s != nil {
			h.log.Info("recipient suppressed by a delivery event", "provider", ep.provider, "source", string(s.Source),
				"row_id", s.SourceRow, "reason", s.Reason)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
	return http.StatusOK
}

// excerpt is the start of a payload as email_events.raw_excerpt keeps it.
func excerpt(b []byte) string {
	if len(b) > outbox.MaxEventExcerptBytes {
		b = b[:outbox.MaxEventExcerptBytes]
	}
	return string(b) // outbox.RecordEvent cleans and caps on a rune boundary
}

// parseTime reads a provider's RFC 3339 timestamp; nil when absent or
// unreadable (the event still counts; occurred_at is informational).
func parseTime(s string) *time.Time {
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil
	}
	return &t
}

// allowedURL is the default SNS trust rule: https, on a host of Amazon SNS
// (sns.<region>.amazonaws.com, or .amazonaws.com.cn in China), on the
// default port.
func allowedURL(u *url.URL) bool {
	return u.Scheme == "https" && u.Port() == "" && snsHostRE.MatchString(u.Hostname()) && u.User == nil
}
