package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"riverqueue.com/riverui"

	"github.com/postbox/postbox/internal/operator/console"
	"github.com/postbox/postbox/internal/operator/httpapi"
	"github.com/postbox/postbox/internal/operator/portalsite"
	"github.com/postbox/postbox/jobs"
	"github.com/postbox/postbox/migrations"
	"github.com/postbox/postbox/outbox/mailevents"
)

// newServer builds the replica's HTTP surface: /healthz (process alive),
// /readyz (database reachable and migrations current), /metrics, the
// delivery-event endpoints under /events/ (package mailevents), River UI
// under /riverui/ and the console under /console/, both behind the same
// basic auth. The returned start function starts River UI's background
// services and the console's sampler; call it before serving.
func newServer(env *Env, pool *pgxpool.Pool, rep *replica, reg *prometheus.Registry) (*http.Server, func(context.Context) error, error) {
	client, pipeline, emailMetrics := rep.client, rep.pipeline, rep.metrics
	// Built once: readiness probes arrive every few seconds, and loading
	// both migration sets per probe would be work done on a hot path.
	migrator, err := migrations.New(pool, env.Logger)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", readyHandler(pool, migrator))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, Timeout: 10 * time.Second}))
	events, err := mailevents.New(mailevents.Config{
		DB:         pool,
		Settings:   env.Config.Events,
		Metrics:    emailMetrics,
		Registerer: reg,
		Logger:     env.Logger,
	})
	if err != nil {
		return nil, nil, err
	}
	mux.Handle("/events/", events)

	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints[pgx.Tx](client, nil),
		Logger:    riverUILogger(env.Logger.With("component", "riverui")),
		Prefix:    "/riverui",
	})
	if err != nil {
		return nil, nil, err
	}
	mux.Handle("/riverui/", riverUIAuth(env.Config, env.Logger, ui))

	con, err := console.New(console.Config{DB: pool, Replayer: pipeline, Logger: env.Logger,
		Prefix: consolePrefix, RiverUIPrefix: "/riverui", CSRFKey: consoleCSRFKey(env.Config)})
	if err != nil {
		return nil, nil, err
	}
	mux.Handle(consolePrefix+"/", operatorAuth(env.Config, env.Logger, "the console", con))
	mux.Handle("GET "+consolePrefix, http.RedirectHandler(consolePrefix+"/", http.StatusMovedPermanently))

	// The tenant portal has its own sign-in (a link the application
	// minted), so it is not behind the operator's basic auth.
	if len(env.Config.Portal.Keys) > 0 {
		tenants, err := portalsite.New(portalsite.Config{DB: pool, Settings: env.Config.Portal, Webhook: env.Config.Webhook,
			Dispatcher: pipeline, Logger: env.Logger})
		if err != nil {
			return nil, nil, err
		}
		mux.Handle(portalsite.Prefix+"/", tenants)
		env.Logger.Info("tenant portal on", "path", portalsite.Prefix+"/")
	}
	// The HTTP API authenticates each request itself (an application key
	// or a tenant token).
	if len(env.Config.API.Keys) > 0 {
		api, err := httpapi.New(httpapi.Config{DB: pool, Settings: env.Config.API, PortalKeys: env.Config.Portal.Keys,
			Emails: rep.emails, Webhook: env.Config.Webhook, Dispatcher: pipeline, Logger: env.Logger})
		if err != nil {
			return nil, nil, err
		}
		mux.Handle(httpapi.Prefix+"/", api)
		env.Logger.Info("HTTP API on", "path", httpapi.Prefix+"/", "keys", len(env.Config.API.Keys))
	}

	srv := &http.Server{
		Addr:              env.Config.HTTPAddr,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	srv.RegisterOnShutdown(func() { migrator.Close() })
	start := func(ctx context.Context) error {
		go con.Run(ctx)
		return ui.Start(ctx)
	}
	return srv, start, nil
}

// consoleCSRFKey derives the console's CSRF key from the operator
// password, so every replica behind one load balancer accepts the tokens
// of the others' pages. Without credentials (development only) it is nil:
// a random key per process.
func consoleCSRFKey(cfg Config) []byte {
	if cfg.RiverUIPassword == "" {
		return nil
	}
	sum := sha256.Sum256([]byte("postbox console csrf v1\x00" + cfg.RiverUIUser + "\x00" + cfg.RiverUIPassword))
	return sum[:]
}

// consolePrefix is where the console is mounted; the shift jobs' output
// links to it (jobs.ConsolePrefix).
const consolePrefix = jobs.ConsolePrefix

func readyHandler(pool *pgxpool.Pool, m *migrations.Migrator) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := m.RequireCurrent(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	}
}

// riverUIAuth puts River UI, which has no auth of its own, behind HTTP
// basic auth when credentials are configured. In production it refuses to
// serve the UI without them: the dashboard can cancel and retry jobs.
func riverUIAuth(cfg Config, logger *slog.Logger, next http.Handler) http.Handler {
	return operatorAuth(cfg, logger, "River UI", next)
}

// operatorAuth is the one auth of the operator surfaces — River UI and the
// console, which can requeue and replay: HTTP basic auth with
// RIVERUI_USERNAME and RIVERUI_PASSWORD, and in production a refusal when
// they are not set. what names the surface in the refusal and the logs.
func operatorAuth(cfg Config, logger *slog.Logger, what string, next http.Handler) http.Handler {
	if cfg.RiverUIUser == "" {
		if cfg.Production() {
			logger.Warn(what+" disabled: APP_ENV=production requires RIVERUI_USERNAME and RIVERUI_PASSWORD", "surface", what)
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, what+" is disabled: set RIVERUI_USERNAME and RIVERUI_PASSWORD", http.StatusForbidden)
			})
		}
		logger.Warn(what+" is served without authentication; set RIVERUI_USERNAME and RIVERUI_PASSWORD", "surface", what)
		return next
	}
	user, pass := []byte(cfg.RiverUIUser), []byte(cfg.RiverUIPassword)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		// Evaluate both comparisons so timing does not reveal which failed.
		userOK := subtle.ConstantTimeCompare([]byte(u), user) == 1
		passOK := subtle.ConstantTimeCompare([]byte(p), pass) == 1
		if !ok || !userOK || !passOK {
			w.Header().Set("WWW-Authenticate", `Basic realm="postbox operator (River UI, console)", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
