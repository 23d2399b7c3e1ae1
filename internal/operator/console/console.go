package console

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/operator/backlog"
	"github.com/postbox/postbox/internal/operator/htmlpage"
	"github.com/postbox/postbox/internal/operator/story"
	"github.com/postbox/postbox/webhook"
)

//go:embed templates/*.html
var templateFS embed.FS

// Replayer is what the replay actions need: a webhook Dispatcher, whose
// replays make their first attempts within the process's webhook cap.
type Replayer interface {
	ReplayEvent(ctx context.Context, eventID string) (webhook.Replay, error)
	ReplayFailedSince(ctx context.Context, endpointID string, since time.Time) (webhook.ReplayBatch, error)
}

// Config configures New. DB is required.
type Config struct {
	DB claim.DB
	// Replayer runs the replay actions; nil leaves them out.
	Replayer Replayer
	Logger   *slog.Logger // nil discards
	// Prefix is where the console is mounted: "/console" when empty.
	Prefix string
	// RiverUIPrefix is River UI's mount, for links to the jobs that
	// touched a row; empty leaves the links out.
	RiverUIPrefix string
	// CSRFKey signs the CSRF tokens. Replicas behind one load balancer
	// need the same key; nil draws a random one, so tokens last as long as
	// the process.
	CSRFKey []byte
	// SampleEvery is how often Run samples the due figures for the chart;
	// zero means DefaultSampleEvery.
	SampleEvery time.Duration
	// Now is the clock for --since ages; nil means time.Now.
	Now func() time.Time
}

// DefaultSampleEvery is the chart's sampling interval: an hour of samples
// fits in the ring (maxSamples).
const DefaultSampleEvery = 10 * time.Second

// Console is the console's http.Handler.
type Console struct {
	db       claim.DB
	replayer Replayer
	logger   *slog.Logger
	prefix   string
	riverUI  string
	csrfKey  []byte
	every    time.Duration
	now      func() time.Time
	pages    *htmlpage.Set
	mux      *http.ServeMux
	samples  *samples
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.DB == nil {
		return nil, errors.New("console: Config.DB is required")
	}
	c := &Console{db: cfg.DB, replayer: cfg.Replayer, logger: cfg.Logger, prefix: strings.TrimSuffix(cfg.Prefix, "/"),
		riverUI: strings.TrimSuffix(cfg.RiverUIPrefix, "/"), csrfKey: cfg.CSRFKey, every: cfg.SampleEvery, now: cfg.Now,
		samples: newSamples()}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.logger = c.logger.With("component", "console")
	if c.prefix == "" {
		c.prefix = "/console"
	}
	if c.csrfKey == nil {
		c.csrfKey = make([]byte, 32)
		_, _ = rand.Read(c.csrfKey)
	}
	if c.every <= 0 {
		c.every = DefaultSampleEvery
	}
	if c.now == nil {
		c.now = time.Now
	}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// pages are the templates, each parsed with the layout.
var pages = []string{"home", "story", "failed", "endpoints", "confirm", "problem"}

func (c *Console) parseTemplates() error {
	var err error
	c.pages, err = htmlpage.Parse("console", templateFS, c.funcs(), c.logger, pages...)
	return err
}

func (c *Console) routes() {
	m := http.NewServeMux()
	p := c.prefix
	m.HandleFunc("GET "+p+"/{$}", c.home)
	m.HandleFunc("GET "+p+"/search", c.search)
	m.HandleFunc("GET "+p+"/find/{q}", c.find)
	for _, k := range []story.Kind{story.KindEmail, story.KindInvoice, story.KindCustomer, story.KindRecipient,
		story.KindEvent, story.KindDelivery, story.KindEndpoint, story.KindWebhookOutbox} {
		m.HandleFunc("GET "+p+"/"+pathOf(k)+"/{q}", c.storyPage(k))
	}
	m.HandleFunc("GET "+p+"/failed", c.failed)
	m.HandleFunc("GET "+p+"/endpoints", c.endpoints)
	m.HandleFunc("GET "+p+"/confirm/{action}", c.confirm)
	m.HandleFunc("POST "+p+"/do/{action}", c.do)
	m.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		c.problem(w, r, http.StatusNotFound, "No such console page: "+r.URL.Path)
	})
	c.mux = m
}

// ServeHTTP serves the console under its prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Pages are self-contained: no script at all, styles inline.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// pathOf is a kind's page path: /console/<path>/<q>.
func pathOf(k story.Kind) string {
	if k == story.KindWebhookOutbox {
		return "webhook-outbox"
	}
	return string(k)
}

// URL is the page of q as kind k.
func (c *Console) URL(k story.Kind, q string) string {
	return c.prefix + "/" + pathOf(k) + "/" + url.PathEscape(q)
}

// view is what every page template gets.
type view struct {
	Title   string
	Prefix  string
	RiverUI string
	User    string
	CSRF    string
	Query   string
	Flash   string
	Data    any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	v := view{Title: title, Prefix: c.prefix, RiverUI: c.riverUI, User: user(r), Data: data, Query: r.FormValue("q")}
	v.CSRF = c.token(c.session(w, r), v.User)
	if msg := r.URL.Query().Get("done"); c.verify(msg, r.URL.Query().Get("sig")) {
		v.Flash = msg
	}
	c.pages.Render(w, status, page, v)
}

// problem renders an error page: bad input, nothing found, a refusal.
func (c *Console) problem(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "problem", http.StatusText(status), msg)
}

func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		// redact shows an endpoint URL without what may be a token.
		"redact":       webhook.RedactURL,
		"plural":       story.Plural,
		"due":          story.Due,
		"breakerCount": story.BreakerCount,
		"ordering":     story.OrderingLine,
		"ts":           htmlpage.Timestamp,
		// customerURL is a customer's story page.
		"customerURL": func(id string) string { return c.URL(story.KindCustomer, id) },
		"dur": func(d time.Duration) string {
			switch {
			case d <= 0:
				return "0"
			case d < time.Second:
				return d.Round(time.Millisecond).String()
			}
			return d.Round(time.Second).String()
		},
		"pct":   func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
		"url":   func(kind, q string) string { return c.URL(story.Kind(kind), q) },
		"job":   func(id int64) string { return fmt.Sprintf("%s/jobs/%d", c.riverUI, id) },
		"chart": func(outbox string) template.HTML { return c.samples.chart(outbox) },
		"short": func(s string, n int) string {
			if r := []rune(s); len(r) > n {
				return string(r[:n-1]) + "…"
			}
			return s
		},
	}
}

// Run samples the due figures every SampleEvery until ctx ends, for the
// chart. Without it the chart shows the samples page views took.
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		c.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Console) sample(ctx context.Context) []backlog.Figures {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	figs, err := backlog.ReadFigures(ctx, c.db)
	if err != nil {
		c.logger.Warn("console: sampling the due figures failed", "error", err.Error())
		return nil
	}
	c.samples.add(figs)
	return figs
}
