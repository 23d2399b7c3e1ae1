package jobs

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postbox/postbox/internal/pgtest"
	"github.com/postbox/postbox/webhook"
)

func webhookTestLogger() *slog.Logger {
	if os.Getenv("POSTBOX_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// webhookReceiver is a real HTTP receiver on loopback that verifies every
// request with the Standard Webhooks reference library. fail, if set,
// answers a request instead of 200 when it returns true.
type webhookReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	verified map[string]int // webhook-id → verified requests
	requests int
	wh       *standardwebhooks.Webhook
	fail     func(w http.ResponseWriter, n int) bool
}

func (rc *webhookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.requests++
	n := rc.requests
	rc.mu.Unlock()
	if rc.fail != nil && rc.fail(w, n) {
		return
	}
	if err := rc.wh.Verify(body, r.Header); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	rc.mu.Lock()
	rc.verified[r.Header.Get(webhook.HeaderID)]++
	rc.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (rc *webhookReceiver) verifiedCount() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]int, len(rc.verified))
	for k, v := range rc.verified {
		out[k] = v
	}
	return out
}

// webhookE2E is the real thing: a River client working the webhook and
// maintenance queues over a pgtest database, a webhook.Pipeline allowed to
// reach loopback, and a verifying receiver.
type webhookE2E struct {
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	receiver *webhookReceiver
}

func startWebhookE2E(t *testing.T, ctx context.Context, periodic []*river.PeriodicJob,
	fail func(w http.ResponseWriter, n int) bool, schedule []time.Duration) *webhookE2E {
	t.Helper()
	pool := pgtest.NewPool(t)
	pipeline, err := webhook.New(pool, webhook.Options{
		Config: webhook.Config{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		// A short window hands each drain back to River quickly, so Stop
		// at the end of the test is prompt.
		DrainWindow: time.Second,
		Schedule:    schedule,
		Logger:      webhookTestLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pipeline.Close)

	rc := &webhookReceiver{verified: map[string]int{}, fail: fail}
	rc.Server = httptest.NewServer(rc)
	t.Cleanup(rc.Close)
	ep, err := webhook.CreateEndpoint(ctx, pool, webhook.Config{}, webhook.EndpointParams{URL: rc.URL + "/hooks"})
	if err != nil {
		t.Fatal(err)
	}
	if rc.wh, err = standardwebhooks.NewWebhook(ep.Secret); err != nil {
		t.Fatal(err)
	}

	workers := river.NewWorkers()
	AddWebhookWorkers(workers, pipeline, WebhookWorkersConfig{Logger: webhookTestLogger()})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{QueueWebhook: {MaxWorkers: 4}, QueueMaintenance: {MaxWorkers: 1}},
		Workers:           workers,
		PeriodicJobs:      periodic,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            webhookTestLogger(),
		TestOnly:          true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			t.Errorf("stop River: %v", err)
		}
	})
	return &webhookE2E{pool: pool, client: client, receiver: rc}
}

// waitSucceeded waits until the event produced by outbox row id has a
// succeeded delivery, and checks the receiver verified it exactly once.
func (e *webhookE2E) waitSucceeded(t *testing.T, ctx context.Context, outboxID string) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var eventID string
	for {
		err := e.pool.QueryRow(waitCtx, `SELECT e.id FROM webhook_events e JOIN webhook_deliveries d ON d.event_id = e.id
WHERE e.outbox_id = $1 AND d.status = 'succeeded'`, outboxID).Scan(&eventID)
		if err == nil {
			break
		}
		select {
		case <-waitCtx.Done():
			t.Fatalf("outbox row %s never ended as a succeeded delivery (last: %v)", outboxID, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n := e.receiver.verifiedCount()[eventID]; n != 1 {
		t.Fatalf("receiver verified event %s %d times, want once", eventID, n)
	}
}

// End to end: a plain SQL INSERT into webhook_outbox — no Go, no kick — is
// fanned out by the periodic River tick and delivered, signed, to a real
// receiver.
func TestWebhookEndToEnd_PlainInsertDeliveredByTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startWebhookE2E(t, ctx, WebhookPeriodicJobs(100*time.Millisecond, time.Hour), nil, nil)
	var id string
	if err := e.pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload)
VALUES ('invoice.paid', '{"invoice_id": "in_1"}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	e.waitSucceeded(t, ctx, id)
	e.receiver.mu.Lock()
	n := e.receiver.requests
	e.receiver.mu.Unlock()
	if n != 1 {
		t.Errorf("receiver got %d requests, want 1", n)
	}
}

// The kick an Enqueue adds to the application's transaction drains the
// outbox on its own: no periodic job is configured here.
func TestWebhookEndToEnd_KickDeliversWithoutTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startWebhookE2E(t, ctx, nil, nil, nil)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	id, err := webhook.Enqueuer{Kick: WebhookKick(e.client)}.Enqueue(ctx, tx, "invoice.paid", []byte(`{"invoice_id":"in_2"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitSucceeded(t, ctx, id)
}

// The periodic retry pass delivers what the first attempt could not: the
// receiver answers 503 with Retry-After: 1 once, then accepts.
func TestWebhookEndToEnd_RetryPassDeliversAfterFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	busyOnce := func(w http.ResponseWriter, n int) bool {
		if n > 1 {
			return false
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	e := startWebhookE2E(t, ctx, WebhookPeriodicJobs(100*time.Millisecond, time.Hour), busyOnce, nil)
	var id string
	if err := e.pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload)
VALUES ('invoice.paid', '{"invoice_id": "in_3"}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	e.waitSucceeded(t, ctx, id)
	var attempts int
	if err := e.pool.QueryRow(ctx, `SELECT d.attempts FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
WHERE e.outbox_id = $1`, id).Scan(&attempts); err != nil || attempts != 2 {
		t.Fatalf("attempts = %d, %v; want 2 (birth, then one retry claim)", attempts, err)
	}
}

func TestWebhookArgs_InsertOpts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  interface{ InsertOpts() river.InsertOpts }
		kind  string
		queue string
	}{
		{WebhookTickArgs{}, "postbox_webhook_tick", QueueWebhook},
		{WebhookKickArgs{}, "postbox_webhook_kick", QueueWebhook},
		{WebhookRetryArgs{}, "postbox_webhook_retry", QueueWebhook},
		{WebhookPruneArgs{}, "postbox_webhook_prune", QueueMaintenance},
	} {
		opts := tc.args.InsertOpts()
		if kind := tc.args.(river.JobArgs).Kind(); kind != tc.kind {
			t.Errorf("Kind = %s, want %s", kind, tc.kind)
		}
		if opts.Queue != tc.queue || opts.MaxAttempts != 1 {
			t.Errorf("%s: queue %s max attempts %d, want %s and 1", tc.kind, opts.Queue, opts.MaxAttempts, tc.queue)
		}
		for _, s := range []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateScheduled} {
			if !slices.Contains(opts.UniqueOpts.ByState, s) {
				t.Errorf("%s: unique states lack %s", tc.kind, s)
			}
		}
		if slices.Contains(opts.UniqueOpts.ByState, rivertype.JobStateCompleted) {
			t.Errorf("%s: unique while completed: a finished tick would block the next for 24 h", tc.kind)
		}
	}
	if n := len(WebhookPeriodicJobs(0, 0)); n != 3 {
		t.Errorf("WebhookPeriodicJobs has %d jobs, want tick, retry and prune", n)
	}
}

// A burst of enqueues in one transaction leaves one pending kick, and a
// tick waiting behind a running one is not inserted twice.
func TestWebhookKick_BurstLeavesOnePendingKick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: webhookTestLogger()}) // insert-only
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	e := webhook.Enqueuer{Kick: WebhookKick(client)}
	for range 3 {
		if _, err := e.Enqueue(ctx, tx, "invoice.paid", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	rivertest.RequireInsertedTx[*riverpgxv5.Driver](ctx, t, tx, &WebhookKickArgs{},
		&rivertest.RequireInsertedOpts{Queue: QueueWebhook, MaxAttempts: 1})
	var kicks int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'postbox_webhook_kick'`).Scan(&kicks); err != nil || kicks != 1 {
		t.Fatalf("%d kick jobs, %v; want 1", kicks, err)
	}
	if _, err := client.InsertTx(ctx, tx, WebhookTickArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := client.InsertTx(ctx, tx, WebhookTickArgs{}, nil); err != nil || !res.UniqueSkippedAsDuplicate {
		t.Fatalf("second tick: %+v, %v; want skipped as a duplicate", res, err)
	}
}

// The prune job deletes dispatched outbox rows past retention and nothing
// else.
func TestWebhookPruneWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	pipeline, err := webhook.New(pool, webhook.Options{Logger: webhookTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload, status, dispatched_at) VALUES
	('old', '{}', 'dispatched', now() - interval '8 days'),
	('recent', '{}', 'dispatched', now() - interval '1 day'),
	('pending', '{}', 'pending', NULL)`); err != nil {
		t.Fatal(err)
	}
	worker := &WebhookPruneWorker{run: &webhookRun{pipeline: pipeline, logger: webhookTestLogger()}}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := rivertest.NewWorker(t, riverpgxv5.New(pool), &river.Config{}, worker).Work(ctx, t, tx, WebhookPruneArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT event_type FROM webhook_outbox ORDER BY event_type`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(left, []string{"pending", "recent"}) {
		t.Fatalf("left after prune: %v, %v; want pending and recent (default retention 7 days)", left, err)
	}
}
