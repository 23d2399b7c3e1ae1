package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/postbox/postbox/cmd/worker/internal/poolsize"
	"github.com/postbox/postbox/cmd/worker/internal/telemetry"
	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/internal/engine/version"
	"github.com/postbox/postbox/internal/operator/backlog"
	"github.com/postbox/postbox/jobs"
	"github.com/postbox/postbox/webhook"
)

func init() {
	register(command{
		Name:     "run",
		JSONLogs: true,
		Summary:  "run one worker replica until SIGINT/SIGTERM",
		Help: "Runs one replica of the pool: its email and webhook lanes (River shift jobs on the replica's own " +
			"queue), the wake-up listener, the leader's periodic passes when it leads, and the HTTP server on " +
			"HTTP_ADDR (/healthz, /readyz, /metrics, /riverui/). It refuses to start while migrations are behind " +
			"(run 'worker migrate up' first). On SIGTERM it claims nothing more and gives in-flight rows " +
			"SHUTDOWN_TIMEOUT to finish before cancelling them. Everything else is configured by the environment " +
			"(docs/OPERATIONS.md, \"Configuration\"); it takes no arguments.",
		Run: runRun,
	})
}

func runRun(ctx context.Context, env *Env, _ []string) error {
	size, _, err := poolsize.Replica(env.Config.DatabaseURL, env.Config.EmailConcurrency)
	if err != nil {
		return err
	}
	env.poolSize = size
	// Before the migrations' check, whose statements a transaction pooler
	// taken for a session could already fail with a less telling error.
	pool, err := env.Pool(ctx)
	if err != nil {
		return err
	}
	if err := checkSessionPooling(ctx, env.Logger, env.Config.Pooling, pool); err != nil {
		return err
	}
	if pool, err = env.MigratedPool(ctx); err != nil {
		return err
	}
	if err := checkDirectURL(ctx, env.Config.Pooling, pool); err != nil {
		return err
	}
	warnDefaultRelay(env)
	return runReplica(ctx, env, pool, replicaOptions{}, nil)
}

// runReplica boots a replica on pool — River, the dispatcher, the webhook
// pipeline and the HTTP server — and runs it until ctx ends. If running is
// not nil it is called once everything serves; the replica shuts down when
// it returns an error or ctx ends, whichever comes first (errDone is a
// clean stop).
func runReplica(ctx context.Context, env *Env, pool *pgxpool.Pool, opts replicaOptions,
	running func(ctx context.Context, rep *replica, addr string) error) error {
	cfg, log := env.Config, env.Logger
	for _, u := range unknownVariables(setVariables(env.lookup)) {
		if u.Nearest != "" {
			log.Warn("ignoring "+u.Name+": postbox reads no such variable; did you mean "+u.Nearest+"?", "variable", u.Name, "did_you_mean", u.Nearest)
			continue
		}
		log.Warn("ignoring "+u.Name+": postbox reads no such variable", "variable", u.Name)
	}
	// The effective settings, once, so a misread variable shows here (the
	// SMTP transport is logged by the mailer). No secret is among them.
	log.Info("postbox worker starting",
		"app_env", cfg.AppEnv, "http_addr", cfg.HTTPAddr,
		"email_concurrency", cfg.EmailConcurrency, "webhook_concurrency", cmp.Or(cfg.Webhook.Concurrency, webhook.DefaultConcurrency),
		"email_batch_size", cfg.Leases.BatchSize, "email_batch_timeout", cfg.Leases.BatchTimeout.String(),
		"email_claim_lease", cfg.Leases.ClaimLease(cfg.Leases.BatchSize).String(),
		"poll_interval", cfg.PollInterval.String(), "shutdown_timeout", cfg.ShutdownTimeout.String(),
		"retry_backoff_scale", cfg.RetryBackoffScale, "sealed_secrets", cfg.Keys != nil)
	// What DATABASE_URL is, where wake-ups come from, and what the
	// replica may hold of the database's max_connections: the pool, and
	// the listeners beside it.
	logDatabase(log, cfg, pool.Config().MaxConns, poolsize.ForReplica(cfg.EmailConcurrency))
	// The weeks ahead of the history tables, made again here rather than
	// left to the leader's pass alone: a mark whose week does not exist
	// fails, and a pool that went weeks without a pass (no replica ran)
	// has its first marks right after boot. A failure is not fatal: the
	// weeks made before still reach ahead (postbox_history_ahead_seconds).
	if made, err := history.Ensure(ctx, pool); err != nil {
		log.Error("history: could not make the weeks ahead; the history pass tries again hourly", "error", err)
	} else if made > 0 {
		log.Info("history weeks made", "weeks", made)
	}
	log.Info("history retention", "email", history.FormatRetention(cfg.History.Email), "webhook", history.FormatRetention(cfg.History.Webhook))

	// Tracing before the replica, whose dispatchers take the provider;
	// flushed after it has stopped (the deferred call runs after
	// shutdown below).
	tp, err := telemetry.Start(ctx, cfg.Tracing, log.With("component", "tracing"))
	if err != nil {
		return err
	}
	defer telemetry.Stop(tp, log.With("component", "tracing"))
	if tp != nil {
		opts.TracerProvider = tp
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		jobs.NewJobsCollector(pool, log, jobs.ShiftArgs{}.Kind(), jobs.RetryPassArgs{}.Kind(), jobs.PruneArgs{}.Kind()),
		jobs.NewHistoryCollector(pool, cfg.History, log),
		backlog.NewCollector(pool, log), version.Collector())

	rep, err := newReplica(env, pool, reg, opts)
	if err != nil {
		return err
	}
	srv, startUI, err := newServer(env, pool, rep, reg)
	if err != nil {
		return err
	}
	// River and the UI get a context that outlives the signal: shutdown is
	// driven explicitly below, soft first, so in-flight rows can mark.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	if err := startUI(runCtx); err != nil {
		return fmt.Errorf("start River UI: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR=%s: %w", cfg.HTTPAddr, err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	jobs.CountFinished(runCtx, rep.client, reg)
	if err := rep.start(runCtx); err != nil {
		return err
	}
	log.Info("postbox worker running", "http_addr", ln.Addr().String())

	done := make(chan error, 1)
	if running != nil {
		go func() { done <- running(ctx, rep, ln.Addr().String()) }()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-done:
	case runErr = <-serveErr:
		log.Error("HTTP server stopped", "error", runErr)
	}
	if errors.Is(runErr, errDone) {
		runErr = nil
	}
	return errors.Join(runErr, shutdown(env, rep, srv))
}

// errDone ends runReplica's running callback without an error.
var errDone = errors.New("done")

// After SHUTDOWN_TIMEOUT, what shutdown may still take: the hard stop's
// cancel and the HTTP server's close. A process manager's grace period
// before SIGKILL must cover all three (deploy/kubernetes: its test adds
// them up).
const (
	hardStopTimeout     = 15 * time.Second
	httpShutdownTimeout = 5 * time.Second
)

// shutdown stops claiming, gives in-flight rows SHUTDOWN_TIMEOUT to finish
// and mark, then cancels what is left. Marks run on detached contexts, so
// even a cancelled row records its outcome.
func shutdown(env *Env, rep *replica, srv *http.Server) error {
	log := env.Logger
	log.Info("shutting down: no new claims; waiting for in-flight work", "timeout", env.Config.ShutdownTimeout.String())
	soft, cancel := context.WithTimeout(context.Background(), env.Config.ShutdownTimeout)
	defer cancel()
	err := rep.stop(soft)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("soft stop timed out; cancelling in-flight work")
		hard, cancelHard := context.WithTimeout(context.Background(), hardStopTimeout)
		defer cancelHard()
		err = rep.stopAndCancel(hard)
	}
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancelHTTP()
	if shutErr := srv.Shutdown(httpCtx); shutErr != nil && err == nil {
		err = shutErr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("postbox worker stopped")
	return nil
}

// warnDefaultRelay says so when no SMTP variable says where the relay is:
// the defaults are localhost:587 with STARTTLS required, which a
// development machine seldom has, and the first send, not the boot, would
// otherwise be the first to tell.
func warnDefaultRelay(env *Env) {
	for _, name := range []string{"SMTP_HOST", "SMTP_PORT", "SMTP_TLS"} {
		if v, ok := env.lookup(name); ok && strings.TrimSpace(v) != "" {
			return
		}
	}
	c := env.Config.SMTP
	env.Logger.Warn("smtp: SMTP_HOST, SMTP_PORT and SMTP_TLS are unset: mail goes to the default relay, "+
		net.JoinHostPort(c.Host, strconv.Itoa(c.Port))+", STARTTLS required; for a local Mailpit set "+
		"SMTP_HOST=localhost SMTP_PORT=1025 SMTP_TLS=none (docs/OPERATIONS.md, \"Configuration\")",
		"host", c.Host, "port", c.Port, "mode", c.Mode)
}
