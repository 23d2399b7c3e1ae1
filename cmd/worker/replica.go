package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/jobs"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/outbox/templatedir"
	"github.com/postbox/postbox/smtp"
	"github.com/postbox/postbox/webhook"
)

// replica is what one `worker run` process runs: the email dispatcher, the
// webhook pipeline, and the River client whose jobs drive them.
type replica struct {
	id         string
	pool       *pgxpool.Pool
	client     *river.Client[pgx.Tx]
	dispatcher *outbox.Dispatcher
	pipeline   *webhook.Dispatcher
	mailer     *smtp.Mailer
	metrics    *outbox.Metrics // the email series, shared with the delivery-event endpoints
	// emails enqueues as the application would, sealing what the
	// dispatcher's keys and template kinds call secret: the HTTP API's.
	emails    *outbox.Enqueuer
	waker     *jobs.Waker
	shifts    *jobs.Shifts
	listeners *listeners
}

// replicaOptions are what differs between `worker run` and the demo.
type replicaOptions struct {
	// WebhookBackoff overrides the webhook retry schedule; nil keeps the
	// documented default. The demo compresses it to seconds.
	WebhookBackoff []time.Duration
	// TracerProvider, when tracing is on, makes the email, webhook and
	// River job spans; nil records none.
	TracerProvider trace.TracerProvider
	// Templates, if set, is the email template directory in place of
	// EMAIL_TEMPLATES_DIR's: the demo's is embedded.
	Templates *templatedir.Set
}

func newReplica(env *Env, pool *pgxpool.Pool, reg prometheus.Registerer, opts replicaOptions) (*replica, error) {
	cfg, log := env.Config, env.Logger
	if opts.WebhookBackoff == nil && cfg.RetryBackoffScale != 1 {
		opts.WebhookBackoff = webhook.DefaultBackoff.Scaled(cfg.RetryBackoffScale)
		log.Warn("retry schedules compressed for testing", "RETRY_BACKOFF_SCALE", cfg.RetryBackoffScale)
	}
	smtpCfg := cfg.SMTP
	smtpCfg.MaxIdle = max(smtpCfg.MaxIdle, cfg.EmailConcurrency) // one connection per batch in flight, kept
	mailer, err := smtp.New(smtpCfg, log.With("component", "smtp"))
	if err != nil {
		return nil, err
	}
	lis, err := newListeners(cfg.Pooling, pool, log)
	if err != nil {
		return nil, err
	}
	waker := lis.waker
	switch {
	case cfg.Keys != nil:
		log.Info("email secret fields are sealed", "keys", cfg.Keys)
	case cfg.Production():
		log.Warn("OUTBOX_ENCRYPTION_KEYS is not set: email secret fields (reset and invite links, tokens, PDFs) " +
			"are stored in plaintext until sent; see docs/ENCRYPTION.md")
	}
	templates := opts.Templates
	if templates == nil {
		if templates, err = loadTemplates(cfg.TemplatesDir); err != nil {
			return nil, err
		}
	}
	if templates != nil {
		log.Info("email templates loaded", "dir", templates.Dir(), "kinds", countDirectory(templates))
	}
	log.Info("email send rate", "EMAIL_RATE_LIMIT", outbox.RateDescription(cfg.EmailRateLimit))
	emailMetrics := outbox.NewMetrics(reg)
	dispatcher, err := outbox.NewDispatcher(pool, outbox.Config{
		Renderer:    renderer(templates),
		Sender:      mailer,
		Concurrency: cfg.EmailConcurrency,
		RateLimit:   cfg.EmailRateLimit,
		Wake:        waker.Email,
		Poll:        cfg.PollInterval,
		Backoff:     leases.EmailBackoff.Scaled(cfg.RetryBackoffScale),
		Leases:      cfg.Leases,
		Logger:      log.With("component", "email"),
		Metrics:     emailMetrics,
		Keys:        cfg.Keys,

		TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	pipeline, err := webhook.NewDispatcher(pool, webhook.Config{
		Settings:  cfg.Webhook,
		Leases:    cfg.Leases,
		Backoff:   opts.WebhookBackoff,
		Wake:      waker.Webhook,
		RetryWake: waker.Deliveries,
		Poll:      cfg.PollInterval,
		Logger:    log,
		Metrics:   webhook.NewMetrics(reg),

		TracerProvider: opts.TracerProvider,
		OnDisable:      opsEmailNotice(cfg.OpsEmail, cfg.Keys),
	})
	if err != nil {
		return nil, err
	}

	id := replicaID()
	host, _ := os.Hostname()
	shifts := jobs.NewShifts(jobs.ShiftsConfig{
		Replica: id,
		Queue:   jobs.ReplicaQueue(host, os.Getpid()),
		Lanes: map[string]jobs.Lane{
			jobs.LaneEmail:   jobs.EmailLane(dispatcher),
			jobs.LaneWebhook: jobs.WebhookLane(pipeline),
		},
		Logger: log.With("component", "shift"),
	})
	passes := jobs.NewPasses(pipeline, pool, jobs.PassesConfig{Owner: id, OrphanEventRetention: cfg.Events.OrphanRetention,
		History: jobs.NewHistory(pool, id, cfg.History, log.With("component", "history")), Logger: log.With("component", "webhook")})
	workers := river.NewWorkers()
	shifts.AddWorkers(workers)
	passes.AddWorkers(workers)
	queue, queueConfig := shifts.Queue()
	maintenance, maintenanceConfig := passes.Queue()

	client, err := river.NewClient(lis.driver, &river.Config{
		// A readable, unique ID shows which replica leads in river_leader
		// and River UI.
		ID:     id,
		Logger: riverLogger(log.With("component", "river")),
		Queues: map[string]river.QueueConfig{
			queue:       queueConfig,
			maintenance: maintenanceConfig,
		},
		Workers:      workers,
		PeriodicJobs: passes.PeriodicJobs(),
		Middleware:   riverTracing(opts.TracerProvider),
		// Every job sets its own Timeout from the leases; River must not
		// rescue a job as stuck before that timeout could have fired.
		RescueStuckJobsAfter: max(shifts.Timeout(), passes.Timeout()) + cfg.Leases.LeaseSlack,
		// Behind a transaction pooler without DATABASE_DIRECT_URL River
		// cannot LISTEN either (pooling.go).
		PollOnly:          lis.pollOnly,
		FetchPollInterval: lis.fetchPoll,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	emails := &outbox.Enqueuer{Keys: cfg.Keys}
	if templates != nil {
		emails.SecretKeys = templates.SecretPayloadKeys()
	}
	return &replica{id: id, pool: pool, client: client, dispatcher: dispatcher, pipeline: pipeline, mailer: mailer,
		metrics: emailMetrics, emails: emails, waker: waker, shifts: shifts, listeners: lis}, nil
}

// start starts the River client; jobs get contexts derived from ctx.
func (r *replica) start(ctx context.Context) error {
	go r.waker.Listen(ctx)
	if err := r.client.Start(ctx); err != nil {
		return fmt.Errorf("start River: %w", err)
	}
	go r.shifts.Keep(ctx, r.client)
	return nil
}

// stop is the soft stop: the dispatcher claims nothing more and releases
// what it has not started, River waits for running jobs.
func (r *replica) stop(ctx context.Context) error {
	r.shifts.Stop()
	r.dispatcher.Stop()
	r.pipeline.Stop()
	err := r.client.Stop(ctx)
	if err == nil {
		r.close()
	}
	return err
}

// stopAndCancel cancels whatever is still running. Rows in flight record a
// transient failure on their detached marks and are retried later.
func (r *replica) stopAndCancel(ctx context.Context) error {
	err := r.client.StopAndCancel(ctx)
	r.close()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (r *replica) close() {
	r.pipeline.Close()
	r.mailer.Close()
	r.listeners.close()
}

// replicaID is host-pid: unique per process, and findable from ps.
func replicaID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
