package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/time/rate"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
	"github.com/postbox/postbox/webhook"
)

// PeerProcess configures one process of the River peer ("one River job
// per message") for the pool sections: a River client whose workers send
// each job's message through an smtp.Mailer, or POST its webhook, as a
// user who picked that design would run it. internal/tooling/cmd/riverpeer runs it.
type PeerProcess struct {
	DatabaseURL       string        // PEER_DATABASE_URL or DATABASE_URL
	SMTPHost          string        // SMTP_HOST
	SMTPPort          int           // SMTP_PORT
	MaxWorkers        int           // PEER_MAX_WORKERS: the default queue's MaxWorkers
	FetchCooldown     time.Duration // PEER_FETCH_COOLDOWN; 0 keeps River's default (100ms)
	FetchPollInterval time.Duration // PEER_FETCH_POLL_INTERVAL; 0 keeps River's default (1s)
	ReadyFile         string        // PEER_READY_FILE: created once the client runs
	UserAgent         string        // PEER_USER_AGENT: sent with every webhook, so a receiver tells the processes apart
	// Rate (PEER_RATE), when set, is the most messages this process sends
	// a second: River has no pool-wide rate limit, so a user who needs
	// the relay's limit kept writes one into the worker, per process.
	Rate int
}

// Environment variables of the peer process, beside DATABASE_URL,
// SMTP_HOST and SMTP_PORT.
const (
	envPeerMaxWorkers    = "PEER_MAX_WORKERS"
	envPeerFetchCooldown = "PEER_FETCH_COOLDOWN"
	envPeerFetchPoll     = "PEER_FETCH_POLL_INTERVAL"
	envPeerReadyFile     = "PEER_READY_FILE"
	envPeerUserAgent     = "PEER_USER_AGENT"
	envPeerRate          = "PEER_RATE"
)

// PeerProcessFromEnv reads a PeerProcess through lookup.
func PeerProcessFromEnv(lookup func(string) (string, bool)) (PeerProcess, error) {
	get := func(k string) string { v, _ := lookup(k); return v }
	p := PeerProcess{DatabaseURL: get("DATABASE_URL"), SMTPHost: get("SMTP_HOST"), ReadyFile: get(envPeerReadyFile), UserAgent: get(envPeerUserAgent)}
	if p.DatabaseURL == "" || p.SMTPHost == "" {
		return p, fmt.Errorf("riverpeer: DATABASE_URL and SMTP_HOST are required")
	}
	var err error
	if p.SMTPPort, err = strconv.Atoi(get("SMTP_PORT")); err != nil {
		return p, fmt.Errorf("riverpeer: SMTP_PORT=%q: %w", get("SMTP_PORT"), err)
	}
	if p.MaxWorkers, err = strconv.Atoi(get(envPeerMaxWorkers)); err != nil || p.MaxWorkers < 1 {
		return p, fmt.Errorf("riverpeer: %s=%q: want a positive integer", envPeerMaxWorkers, get(envPeerMaxWorkers))
	}
	if v := get(envPeerRate); v != "" {
		if p.Rate, err = strconv.Atoi(v); err != nil || p.Rate < 0 {
			return p, fmt.Errorf("riverpeer: %s=%q: want a count of messages a second, 0 for none", envPeerRate, v)
		}
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{envPeerFetchCooldown, &p.FetchCooldown}, {envPeerFetchPoll, &p.FetchPollInterval}} {
		if v := get(d.name); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil {
				return p, fmt.Errorf("riverpeer: %s=%q: %w", d.name, v, err)
			}
		}
	}
	return p, nil
}

// env is the environment that PeerProcessFromEnv reads back.
func (p PeerProcess) env() []string {
	e := []string{
		"DATABASE_URL=" + p.DatabaseURL, "SMTP_HOST=" + p.SMTPHost, "SMTP_PORT=" + strconv.Itoa(p.SMTPPort),
		envPeerMaxWorkers + "=" + strconv.Itoa(p.MaxWorkers), envPeerReadyFile + "=" + p.ReadyFile,
		envPeerUserAgent + "=" + p.UserAgent,
	}
	if p.FetchCooldown > 0 {
		e = append(e, envPeerFetchCooldown+"="+p.FetchCooldown.String())
	}
	if p.FetchPollInterval > 0 {
		e = append(e, envPeerFetchPoll+"="+p.FetchPollInterval.String())
	}
	if p.Rate > 0 {
		e = append(e, envPeerRate+"="+strconv.Itoa(p.Rate))
	}
	return e
}

// peerPoolConns is the peer process's pgx MaxConns: what `worker run`
// opens at least (cmd/worker/env.go), so neither side is short of
// connections.
const peerPoolConns = 20

// RunPeerProcess runs the peer until ctx ends, then stops it softly
// (running jobs finish) within a few seconds.
func RunPeerProcess(ctx context.Context, p PeerProcess, logger *slog.Logger) error {
	cfg, err := pgxpool.ParseConfig(p.DatabaseURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = peerPoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	mailer, err := smtp.New(smtp.Config{
		Host:    p.SMTPHost,
		Port:    p.SMTPPort,
		Mode:    smtp.ModeNone,
		From:    "billing@example.com",
		AppEnv:  "development",
		MaxIdle: p.MaxWorkers,
	}, nil)
	if err != nil {
		return err
	}
	defer mailer.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &peerWorker{mailer: mailer, limiter: peerLimiter(p.Rate)})
	river.AddWorker(workers, newPeerHookWorker(p.MaxWorkers, p.UserAgent))
	host, _ := os.Hostname()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                fmt.Sprintf("%s-%d", host, os.Getpid()),
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: p.MaxWorkers}},
		FetchCooldown:     p.FetchCooldown,
		FetchPollInterval: p.FetchPollInterval,
		Workers:           workers,
	})
	if err != nil {
		return fmt.Errorf("riverpeer: %w", err)
	}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	if err := client.Start(runCtx); err != nil {
		return fmt.Errorf("riverpeer: start: %w", err)
	}
	if p.ReadyFile != "" {
		if err := os.WriteFile(p.ReadyFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return err
		}
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		hard, cancelHard := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancelHard()
		_ = client.StopAndCancel(hard)
	}
	return nil
}

// peerLimiter is the process's send limit, nil for none: a token bucket
// that saves up outbox.RateBurst's worth of sending (at least one
// message), as EMAIL_RATE_LIMIT's does.
func peerLimiter(perSecond int) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(perSecond), max(1, int(float64(perSecond)*outbox.RateBurst.Seconds())))
}

// peerInserter is an insert-only River client that knows the peer's job,
// with the fetch settings of the peer it feeds: River rate-limits its
// insert notifications by the inserting client's FetchCooldown.
func peerInserter(pool *pgxpool.Pool, fetchCooldown time.Duration) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &peerWorker{})
	river.AddWorker(workers, &peerHookWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: discard, Workers: workers, FetchCooldown: fetchCooldown})
	if err != nil {
		return nil, fmt.Errorf("the River peer's insert client: %w", err)
	}
	return client, nil
}

// peerHookArgs is the River peer's webhook job: one delivery, the event
// carried in the job as a user who picked "one River job per delivery"
// would enqueue it.
type peerHookArgs struct {
	URL     string          `json:"url"`
	EventID string          `json:"event_id"`
	Payload json.RawMessage `json:"payload"`
}

func (peerHookArgs) Kind() string { return "bench_peer_webhook" }

// peerHookSecret signs the peer's webhooks, as postbox signs its own.
const peerHookSecret = "whsec_cG9zdGJveC1iZW5jaC1wZWVyLXNlY3JldA=="

// peerHookWorker POSTs the job's event, signed, with a deadline; an answer
// outside 2xx is an error, which River retries.
type peerHookWorker struct {
	river.WorkerDefaults[peerHookArgs]
	client    *http.Client
	userAgent string
}

func newPeerHookWorker(maxWorkers int, userAgent string) *peerHookWorker {
	return &peerHookWorker{userAgent: userAgent, client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: maxWorkers, IdleConnTimeout: time.Minute},
	}}
}

func (w *peerHookWorker) Work(ctx context.Context, job *river.Job[peerHookArgs]) error {
	now := time.Now()
	sig, err := webhook.Sign(peerHookSecret, job.Args.EventID, now, job.Args.Payload)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, job.Args.URL, bytes.NewReader(job.Args.Payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", w.userAgent)
	req.Header.Set(webhook.HeaderID, job.Args.EventID)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, sig)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook %s answered %d", job.Args.EventID, resp.StatusCode)
	}
	return nil
}
