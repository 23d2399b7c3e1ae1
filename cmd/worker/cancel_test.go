package main

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// worker cancel email|webhook withdraws a pending row, records --by, and
// refuses what it cannot cancel with the reason and exit 1; worker show
// says "scheduled for" of a row held by its due time, and "cancelled"
// once it is withdrawn.
func TestCancelCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	var email, claimed, hook string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
		VALUES ('cus_9', '{"to":"ada@example.com","subject":"Trial ends","text":"x","setup_url":"https://x/s"}', now() + interval '3 days')
		RETURNING id`).Scan(&email); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, attempts, next_attempt_at)
		VALUES ('cus_9', '{"to":"ada@example.com","subject":"Now","text":"x"}', 1, now() + interval '5 minutes')
		RETURNING id`).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload, next_attempt_at)
		VALUES ('trial.ending', '{}', now() + interval '3 days') RETURNING id`).Scan(&hook); err != nil {
		t.Fatal(err)
	}
	worker := cliAgainst(url)
	if code, out, errOut := worker("show", email); code != 0 || !strings.Contains(out, "scheduled for ") || strings.Contains(out, "so far, next at") {
		t.Fatalf("show of a scheduled row: %d %q %q; want \"scheduled for\"", code, out, errOut)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"email", []string{"cancel", "email", email, "--by", "carol"}, 0, "cancelled: it will not be sent"},
		{"email again", []string{"cancel", "email", email}, 1, "was already cancelled at"},
		{"email being sent", []string{"cancel", "email", claimed}, 1, "is being sent now (claimed until"},
		{"unknown email", []string{"cancel", "email", "00000000-0000-7000-8000-00000000dead"}, 1, "00000000-0000-7000-8000-00000000dead"},
		{"webhook", []string{"cancel", "webhook", hook, "--by", "carol"}, 0, "will not be fanned out"},
		{"webhook again", []string{"cancel", "webhook", hook}, 1, "was already cancelled at"},
		{"no id", []string{"cancel", "email"}, 2, ""},
	} {
		code, out, errOut := worker(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.contains) {
			t.Errorf("%s: worker %v = %d %q %q; want exit %d saying %q", tc.name, tc.args, code, out, errOut, tc.code, tc.contains)
		}
	}
	var by string
	if err := pool.QueryRow(ctx, `SELECT cancelled_by FROM email_outbox WHERE id = $1 AND status = 'cancelled'
		AND NOT payload ? 'setup_url'`, email).Scan(&by); err != nil || by != "carol" {
		t.Fatalf("cancelled email: by %q (%v); want carol, setup_url scrubbed", by, err)
	}
	if code, out, errOut := worker("show", email); code != 0 || !strings.Contains(out, "by carol before it was sent") {
		t.Fatalf("show of a cancelled row: %d %q %q", code, out, errOut)
	}
}
