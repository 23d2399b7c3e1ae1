package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A replica keeps history bounded on its own: at boot it makes the weeks a
// pool that ran no pass for a week lacks, its leader's history pass drops
// the weeks past EMAIL_HISTORY_RETENTION, and /metrics reports how far
// the weeks reach ahead.
func TestRun_MakesWeeksAtBootAndDropsPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	for _, sql := range []string{
		`SELECT postbox_history_partitions(t, now() - interval '10 weeks', now())
			FROM unnest(ARRAY['email_attempts', 'email_events', 'webhook_delivery_attempts']::regclass[]) t`,
		`INSERT INTO email_attempts (row_id, attempt, outcome, at) VALUES (gen_random_uuid(), 1, 'sent', now() - interval '9 weeks')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range history.Tables {
		weeks, err := history.Weeks(ctx, pool, table)
		if err != nil {
			t.Fatal(err)
		}
		newest := pgx.Identifier{weeks[len(weeks)-1].Partition}.Sanitize()
		for _, sql := range []string{`ALTER TABLE ` + string(table) + ` DETACH PARTITION ` + newest, `DROP TABLE ` + newest} {
			if _, err := pool.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The weeks the boot must make: the three just dropped, and any week
	// the database's migration (at the template's making) did not reach.
	var missing int
	if err := pool.QueryRow(ctx, `SELECT count(*)
FROM unnest(ARRAY['email_attempts', 'email_events', 'webhook_delivery_attempts']) t,
	generate_series(date_trunc('week', now(), 'UTC'), now() + $1 * interval '1 week', interval '1 week') w
WHERE to_regclass(t || '_w' || to_char(w AT TIME ZONE 'UTC', 'YYYYMMDD')) IS NULL`, history.WeeksAhead).Scan(&missing); err != nil {
		t.Fatal(err)
	}
	if missing < 3 {
		t.Fatalf("%d weeks missing before the boot, want at least the 3 dropped", missing)
	}

	addr := freeAddr(t)
	cmd, stderr := startWorker(t, []string{"DATABASE_URL=" + url, "HTTP_ADDR=" + addr, "SMTP_TLS=none", "SMTP_PORT=2525",
		"EMAIL_HISTORY_RETENTION=28d", "WEBHOOK_HISTORY_RETENTION=forever"}, "run")
	waitReady(t, "http://"+addr, stderr)
	if want := fmt.Sprintf(`"msg":"history weeks made","weeks":%d`, missing); !strings.Contains(stderr.String(), want) {
		t.Errorf("the boot did not make the %d missing weeks before the replica started (want %s):\n%s", missing, want, stderr)
	}
	eventually.Explain(t, "the attempt of 9 weeks ago dropped, with 28 days' retention", 2*time.Minute, func() bool {
		var old int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_attempts`).Scan(&old); err != nil {
			t.Fatal(err)
		}
		return old == 0
	}, stderr.String)
	// The pass goes on dropping weeks while the test scrapes. A scrape
	// beside a drop no longer fails (Weeks leaves out a week dropped
	// meanwhile); one whose queries outlast their three seconds on a busy
	// machine is followed by the next, as Prometheus's would be.
	var code int
	var metrics string
	eventually.Explain(t, "/metrics with the history gauges", 2*time.Minute, func() bool {
		code, metrics = get(t, "http://"+addr+"/metrics")
		return code == http.StatusOK && strings.Contains(metrics, `postbox_history_ahead_seconds{history="email_attempts"}`) &&
			strings.Contains(metrics, `postbox_history_overdue_seconds{history="webhook_delivery_attempts"} 0`)
	}, func() string { return fmt.Sprintf("the last (%d):\n%s\nlogs:\n%s", code, metrics, stderr) })
	stopWorker(t, cmd, stderr)
}
