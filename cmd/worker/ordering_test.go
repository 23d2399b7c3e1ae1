package main

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// The operator's path through a key held back by a failed delivery:
// worker show says what holds what, worker ordering blocked lists the key
// with the delivery to act on, worker ordering skip lets the key go on,
// and worker endpoints order-on-failure proceed stops such holds.
func TestOrdering_OperatorSeesAndReleasesABlockedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	var endpoint, head, next string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_endpoints (url, secret) VALUES ('https://hooks.example.com/in?token=s3cret', 'whsec_dGVzdA==')
		RETURNING id`).Scan(&endpoint); err != nil {
		t.Fatal(err)
	}
	for i, dst := range []*string{&head, &next} {
		status, lastError := "failed", "HTTP 500 (gave up after 16 attempts)"
		if i == 1 {
			status, lastError = "pending", ""
		}
		if err := pool.QueryRow(ctx, `WITH ev AS (
	INSERT INTO webhook_events (event_type, payload, ordering_key) VALUES ('invoice.paid', '{}', 'in_7') RETURNING id, ordering_seq)
INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, next_retry_at, last_error, ordering_key, ordering_seq)
SELECT ev.id, $1, $2, 16, now(), NULLIF($3, ''), 'in_7', ev.ordering_seq FROM ev RETURNING id`, endpoint, status, lastError).Scan(dst); err != nil {
			t.Fatal(err)
		}
	}
	worker := cliAgainst(url)

	if code, out, errOut := worker("show", next); code != 0 || !strings.Contains(out, "waits for the earlier delivery "+head) {
		t.Fatalf("show of the waiting delivery: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := worker("show", head); code != 0 || !strings.Contains(out, "worker ordering skip "+head) {
		t.Fatalf("show of the failed head: %d %q %q; want the skip among the fixes", code, out, errOut)
	}
	code, out, errOut := worker("ordering", "blocked")
	if code != 0 || !strings.Contains(out, "in_7") || !strings.Contains(out, head) || strings.Contains(out, "s3cret") {
		t.Fatalf("ordering blocked: %d %q %q; want the key and its failed delivery, and no token", code, out, errOut)
	}
	if code, out, errOut := worker("ordering", "skip", next); code == 0 || !strings.Contains(errOut, "only a failed delivery") {
		t.Fatalf("ordering skip of a pending delivery: %d %q %q; want it refused with the reason", code, out, errOut)
	}
	if code, out, errOut := worker("ordering", "skip", head); code != 0 || !strings.Contains(out, "skipped") {
		t.Fatalf("ordering skip: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := worker("ordering", "blocked"); code != 0 || !strings.Contains(out, "no ordering key is held back") {
		t.Fatalf("ordering blocked after the skip: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := worker("endpoints", "order-on-failure", endpoint, "proceed"); code != 0 || !strings.Contains(out, "proceed") {
		t.Fatalf("endpoints order-on-failure: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := worker("endpoints", "order-on-failure", endpoint, "sometimes"); code == 0 || !strings.Contains(errOut, "want block or proceed") {
		t.Fatalf("endpoints order-on-failure sometimes: %d %q; want a usage error naming the choices", code, errOut)
	}
}
