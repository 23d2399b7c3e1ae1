package main

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// worker requeue email puts a failed row back and logs who did it: --by,
// which worker show then prints among the row's attempts.
func TestRequeueEmailNamesWhoDidIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, status, attempts, last_error)
		VALUES ('cus_9', '{"to":"ada@example.com","subject":"Invoice","text":"x"}', 'failed', 3, '550 no such user')
		RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	worker := cliAgainst(url)
	if code, out, errOut := worker("requeue", "email", id, "--by", "carol"); code != 0 || !strings.Contains(out, "requeued") {
		t.Fatalf("requeue email --by carol: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := worker("show", id); code != 0 || !strings.Contains(out, "by carol, from failed") {
		t.Fatalf("show after the requeue: %d %q %q", code, out, errOut)
	}
}
