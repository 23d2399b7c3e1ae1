package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/cmd/worker/internal/poolsize"
	"github.com/postbox/postbox/jobs"
)

// TestPoolingFromEnv: DATABASE_POOL_MODE and DATABASE_DIRECT_URL, as
// LoadConfig reads them, decide the exec mode of DATABASE_URL's
// connections and whether River and the wake-up listener LISTEN and where.
// Their parsing and refusals are internal/pooling's (TestFromEnv there);
// this is what a replica builds from them.
func TestPoolingFromEnv(t *testing.T) {
	t.Parallel()
	const (
		pooler = "postgres://app:pooler-s3cret@pgbouncer:6432/app"
		direct = "postgres://app:direct-s3cret@db:5432/app"
	)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		exec     pgx.QueryExecMode
		fromURL  bool
		pollOnly bool // River without a notifier, the lanes without a waker
		notifier bool // River's notifier on DATABASE_DIRECT_URL
	}{
		{name: "defaults: a session each", env: map[string]string{"DATABASE_URL": pooler},
			exec: pgx.QueryExecModeCacheStatement},
		{name: "transaction pooler without a direct URL",
			env:  map[string]string{"DATABASE_URL": pooler, "DATABASE_POOL_MODE": "transaction"},
			exec: pgx.QueryExecModeCacheDescribe, pollOnly: true},
		{name: "transaction pooler with a direct URL",
			env:  map[string]string{"DATABASE_URL": pooler, "DATABASE_POOL_MODE": "transaction", "DATABASE_DIRECT_URL": direct},
			exec: pgx.QueryExecModeCacheDescribe, notifier: true},
		{name: "the URL's prepared statements are honoured (PgBouncer 1.21 keeps them)",
			env:  map[string]string{"DATABASE_URL": pooler + "?default_query_exec_mode=cache_statement", "DATABASE_POOL_MODE": "transaction"},
			exec: pgx.QueryExecModeCacheStatement, fromURL: true, pollOnly: true},
		{name: "session mode keeps the URL's exec mode",
			env:  map[string]string{"DATABASE_URL": pooler + "?default_query_exec_mode=simple_protocol"},
			exec: pgx.QueryExecModeSimpleProtocol, fromURL: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			p := cfg.Pooling
			if p.ExecMode != tc.exec || p.ExecModeFromURL != tc.fromURL {
				t.Errorf("exec mode %s (from the URL: %v), want %s (%v)", pooling.ExecModeName(p.ExecMode), p.ExecModeFromURL,
					pooling.ExecModeName(tc.exec), tc.fromURL)
			}

			// What a replica builds from it, without connecting.
			pool, err := pgxpool.New(context.Background(), cfg.DatabaseURL)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			lis, err := newListeners(p, pool, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer lis.close()
			if lis.pollOnly != tc.pollOnly {
				t.Errorf("River PollOnly = %v, want %v", lis.pollOnly, tc.pollOnly)
			}
			if tc.pollOnly && lis.fetchPoll != jobs.PollOnlyFetch {
				t.Errorf("River FetchPollInterval = %s polling only, want %s", lis.fetchPoll, jobs.PollOnlyFetch)
			}
			if _, ok := lis.driver.(directNotifier); ok != tc.notifier {
				t.Errorf("River's notifier on DATABASE_DIRECT_URL: %v, want %v", ok, tc.notifier)
			}
			if woken := lis.waker.Email != nil && lis.waker.Webhook != nil; woken == tc.pollOnly {
				t.Errorf("lanes woken by a listener: %v; with River polling only: %v", woken, tc.pollOnly)
			}
			if want := map[bool]int{true: 0, false: poolsize.ListenerConnections}[tc.pollOnly]; poolsize.Listeners(p) != want {
				t.Errorf("listeners %d, want %d", poolsize.Listeners(p), want)
			}
		})
	}
}

// The boot log says what DATABASE_URL is and where wake-ups come from,
// and names a URL by host, port and database only.
func TestLogDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"session", map[string]string{"DATABASE_URL": "postgres://app:s3cret@db:5432/app"},
			[]string{"DATABASE_POOL_MODE=session", `"wakeups":"listen"`, "a pool of 10 plus 2 listeners; the replica needs 10", `"server_connections_max":12`}},
		{"transaction, LISTEN on the direct URL", map[string]string{"DATABASE_URL": "postgres://app:s3cret@bouncer:6432/app",
			"DATABASE_POOL_MODE": "transaction", "DATABASE_DIRECT_URL": "postgres://app:s3cret@db:5432/app?sslmode=disable"},
			[]string{"wake-ups by LISTEN on DATABASE_DIRECT_URL (db:5432/app)", `"exec_mode":"cache_describe"`,
				"a pool of 10 to the pooler plus 2 listeners on DATABASE_DIRECT_URL", `"direct_connections_max":2`}},
		{"transaction, polling", map[string]string{"DATABASE_URL": "postgres://app:s3cret@bouncer:6432/app", "DATABASE_POOL_MODE": "transaction"},
			[]string{"so no LISTEN: wake-ups by polling, idle lanes every POLL_INTERVAL (1s), River every 250ms", `"wakeups":"poll"`,
				"a pool of 10 to the pooler plus 0 listeners;"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			var buf strings.Builder
			logDatabase(newLogger(&buf, slog.LevelInfo), cfg, 10, poolsize.ForReplica(cfg.EmailConcurrency))
			for _, want := range tc.want {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("boot log lacks %q:\n%s", want, buf.String())
				}
			}
			if strings.Contains(buf.String(), "s3cret") {
				t.Errorf("boot log shows a password:\n%s", buf.String())
			}
		})
	}
}
