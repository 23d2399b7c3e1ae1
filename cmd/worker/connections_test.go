package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/cmd/worker/internal/poolsize"
	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A real replica, its pool_max_conns written in DATABASE_URL (which the
// first connection once passed to Postgres as a runtime parameter,
// failing the boot), drains emails and webhooks while pg_stat_activity
// is sampled: it never holds more than its pool plus the two listeners.
// The figures are logged; docs/OPERATIONS.md ("Connections") quotes them.
// A pool_max_conns below the need stops the boot, naming both numbers.
func TestRun_HoldsNoMoreConnectionsThanItsPool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		pool int
	}{
		{"defaults", nil, 10},
		{"EMAIL_CONCURRENCY=100", []string{"EMAIL_CONCURRENCY=100"}, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.URL(t)
			pool := pgtest.Connect(t, dbURL)
			app := "postbox-conn-" + strings.NewReplacer("=", "-", "_", "-").Replace(strings.ToLower(tc.name))
			workerURL := withParams(t, dbURL, url.Values{"application_name": {app}, "pool_max_conns": {fmt.Sprint(tc.pool)}})

			sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true, Fault: func(smtpsink.Envelope) error {
				time.Sleep(20 * time.Millisecond) // simulates: a relay answering in tens of milliseconds
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				time.Sleep(20 * time.Millisecond) // simulates: a receiver answering in tens of milliseconds
				w.WriteHeader(http.StatusNoContent)
			}))
			defer receiver.Close()
			ctx := context.Background()
			if _, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (url, secret) SELECT $1::text || '/in/' || i, 'whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY='
				FROM generate_series(1, 5) AS i`, receiver.URL); err != nil {
				t.Fatal(err)
			}

			env := append(poolEnv(t, workerURL, sink), tc.env...)
			cmd, out := startWorker(t, env, "run")
			waitShifts(t, pool, 1, out.String)
			if !strings.Contains(out.String(), fmt.Sprintf(`"pool_max_conns":%d`, tc.pool)) {
				t.Fatalf("the boot log does not give the pool of %d:\n%s", tc.pool, out)
			}

			sample := sampler(t, pool, app)
			idle := sample.peakFor(2 * time.Second)
			insertEmails(t, pool, "conn", 2000)
			if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload)
				SELECT 'invoice.paid', jsonb_build_object('n', i) FROM generate_series(1, 200) AS i`); err != nil {
				t.Fatal(err)
			}
			busy := sample.peakUntil(func() bool { return drained(t, pool) }, 3*time.Minute)
			if !drained(t, pool) {
				var left string
				_ = pool.QueryRow(ctx, `SELECT format('emails %s, webhook_outbox %s, deliveries %s',
					(SELECT count(*) FROM email_outbox WHERE status = 'pending'), (SELECT count(*) FROM webhook_outbox WHERE status = 'pending'),
					(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'))`).Scan(&left)
				t.Fatalf("not drained in 3 minutes (pending: %s); logs:\n%s", left, tail(out.String(), 40))
			}
			t.Logf("%s: pool_max_conns %d; backends held: idle %d, draining 2000 emails and 200 events × 5 endpoints %d",
				tc.name, tc.pool, idle, busy)
			if limit := tc.pool + poolsize.ListenerConnections; busy > limit || idle > limit {
				t.Errorf("the replica held %d backends idle, %d draining; want at most its pool %d + %d listeners",
					idle, busy, tc.pool, poolsize.ListenerConnections)
			}
			stopWorker(t, cmd, out)
		})
	}

	t.Run("pool_max_conns below the need", func(t *testing.T) {
		t.Parallel()
		dbURL := withParams(t, pgtest.URL(t), url.Values{"pool_max_conns": {"3"}})
		code, output := runBinary(t, workerBinary(t), []string{"DATABASE_URL=" + dbURL, "HTTP_ADDR=" + freeAddr(t)}, "run")
		if code == 0 || !strings.Contains(output, "pool_max_conns=3 is below the 10") {
			t.Fatalf("worker run with pool_max_conns=3: exit %d\n%s\nwant a refusal naming 3 and the need of 10", code, output)
		}
	})
}

func withParams(t *testing.T, raw string, params url.Values) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, v := range params {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func drained(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM email_outbox WHERE status = 'pending')
		+ (SELECT count(*) FROM webhook_outbox WHERE status = 'pending')
		+ (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 0
}

// backendSampler counts the backends of one application_name in
// pg_stat_activity.
type backendSampler struct {
	t    *testing.T
	pool *pgxpool.Pool
	app  string
}

func sampler(t *testing.T, pool *pgxpool.Pool, app string) *backendSampler {
	return &backendSampler{t: t, pool: pool, app: app}
}

func (s *backendSampler) count() int {
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`, s.app).Scan(&n); err != nil {
		s.t.Error(err)
	}
	return n
}

// peakFor samples for d and returns the most seen.
func (s *backendSampler) peakFor(d time.Duration) int {
	end := time.Now().Add(d)
	return s.peakUntil(func() bool { return time.Now().After(end) }, d+time.Second)
}

// peakUntil samples until done, or limit, and returns the most seen.
func (s *backendSampler) peakUntil(done func() bool, limit time.Duration) int {
	peak := 0
	eventually.Within(limit, func() bool {
		peak = max(peak, s.count())
		return done()
	})
	return peak
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
