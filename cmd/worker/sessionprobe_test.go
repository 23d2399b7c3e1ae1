package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgbouncertest"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestSessionProbe: in session mode a DATABASE_URL at a transaction pooler
// is refused, naming DATABASE_POOL_MODE, however many server connections
// the pooler has; Postgres itself and a pooler in session mode never are.
// Each pool is probed several times over, as boots would, so a probe that
// decided by luck (the pooler happening to hand back the same backend)
// fails here.
func TestSessionProbe(t *testing.T) {
	bin := pgbouncertest.Binary(t)
	t.Parallel()
	for _, tc := range []struct {
		name     string
		bouncer  *pgbouncertest.Options // nil: Postgres itself
		mode     pooling.Mode
		refused  bool
		poolSize int32
	}{
		{"postgres", nil, pooling.Session, false, 10},
		{"postgres, a pool of two", nil, pooling.Session, false, 2},
		{"pgbouncer in session mode", &pgbouncertest.Options{PoolMode: "session", DefaultPoolSize: 8}, pooling.Session, false, 4},
		{"pgbouncer in transaction mode", &pgbouncertest.Options{DefaultPoolSize: 8}, pooling.Session, true, 10},
		{"pgbouncer in transaction mode, one server connection", &pgbouncertest.Options{DefaultPoolSize: 1}, pooling.Session, true, 4},
		{"pgbouncer in transaction mode, said so", &pgbouncertest.Options{DefaultPoolSize: 8}, pooling.Transaction, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			if tc.bouncer != nil {
				_, url = pgbouncertest.Start(t, bin, url, *tc.bouncer)
			}
			pool := probePool(t, url, tc.poolSize)
			var logs logbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			for i := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := checkSessionPooling(ctx, log, pooling.Config{Mode: tc.mode}, pool)
				cancel()
				switch {
				case tc.refused && !errors.Is(err, errTransactionPooler):
					t.Fatalf("probe %d = %v, want errTransactionPooler", i, err)
				case tc.refused && !strings.Contains(err.Error(), "set DATABASE_POOL_MODE=transaction"):
					t.Fatalf("probe %d = %v, want it to name the setting", i, err)
				case !tc.refused && err != nil:
					t.Fatalf("probe %d = %v, want nil", i, err)
				}
			}
			if logs.String() != "" {
				t.Errorf("the probe logged, where it decided every time:\n%s", logs.String())
			}
		})
	}
}

func probePool(t *testing.T, url string, size int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = size
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestRun_RefusesTransactionPoolerInSessionMode: `worker run` at a
// transaction pooler without DATABASE_POOL_MODE=transaction stops at boot
// naming the setting, where it used to boot and lose a share of its
// statements to "prepared statement … does not exist".
func TestRun_RefusesTransactionPoolerInSessionMode(t *testing.T) {
	bin := pgbouncertest.Binary(t)
	t.Parallel()
	_, pooled := pgbouncertest.Start(t, bin, pgtest.URL(t), pgbouncertest.Options{})
	// Bounded well below runBinary's two minutes: a worker that boots
	// where it should have refused runs until killed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBinary(t), "run")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+pooled, "HTTP_ADDR="+freeAddr(t), "SMTP_TLS=none")
	b, err := cmd.CombinedOutput()
	code, out := cmd.ProcessState.ExitCode(), string(b)
	if err == nil || code == 0 || !strings.Contains(out, "DATABASE_URL is a transaction pooler") || !strings.Contains(out, "set DATABASE_POOL_MODE=transaction") {
		t.Fatalf("run at a transaction pooler in session mode: exit %d, want a refusal naming DATABASE_POOL_MODE\n%s", code, out)
	}
}
