package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/history"
	"github.com/postbox/postbox/internal/testsupport/pgtest"
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

	addr := freeAddr(t)
	cmd, stderr := startWorker(t, []string{"DATABASE_URL=" + url, "HTTP_ADDR=" + addr, "SMTP_TLS=none", "SMTP_PORT=2525",
		"EMAIL_HISTORY_RETENTION=28d", "WEBHOOK_HISTORY_RETENTION=forever"}, "run")
	waitReady(t, "http://"+addr, stderr)
	if !strings.Contains(stderr.String(), `"msg":"history weeks made","weeks":3`) {
		t.Errorf("the boot made no weeks; want the 3 missing ones made before the replica started:\n%s", stderr)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var old int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_attempts`).Scan(&old); err != nil {
			t.Fatal(err)
		}
		if old == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the attempt of 9 weeks ago is still kept a minute after boot, with 28 days' retention:\n%s", stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, metrics := get(t, "http://"+addr+"/metrics")
	if code != http.StatusOK || !strings.Contains(metrics, `postbox_history_ahead_seconds{history="email_attempts"}`) ||
		!strings.Contains(metrics, `postbox_history_overdue_seconds{history="webhook_delivery_attempts"} 0`) {
		t.Errorf("/metrics (%d) lacks the history gauges:\n%s", code, metrics)
	}
	stopWorker(t, cmd, stderr)
}
