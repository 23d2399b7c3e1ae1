package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/backlog"
)

// TestFailedWebhookSuggestsReplay: a failed delivery is sent again by
// requeue delivery or replay endpoint, with the ids the listing shows;
// only a failed webhook_outbox row gets the outbox requeue.
func TestFailedWebhookSuggestsReplay(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 9, 1, 10, 30, 15, 0, time.UTC)
	var out bytes.Buffer
	printFailed(&out, []backlog.Failed{
		{Table: "webhook_deliveries", ID: "del-2", CreatedAt: at.Add(time.Hour), Attempts: 8, What: "invoice.paid → https://a",
			Error: "HTTP 500", EventID: "evt-2", EndpointID: "ep-1"},
		{Table: "webhook_deliveries", ID: "del-1", CreatedAt: at, Attempts: 8, What: "invoice.paid → https://a",
			Error: "HTTP 500", EventID: "evt-1", EndpointID: "ep-1"},
	})
	s := out.String()
	for _, want := range []string{"EVENT", "ENDPOINT", "evt-1", "ep-1", "worker requeue delivery <id>",
		"worker replay endpoint <endpoint-id> --since 2026-09-01T10:30:00Z"} {
		if !strings.Contains(s, want) {
			t.Errorf("listing lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "requeue webhook") {
		t.Errorf("listing of deliveries suggests the outbox requeue, which refuses delivery ids:\n%s", s)
	}

	out.Reset()
	printFailed(&out, []backlog.Failed{{Table: "webhook_outbox", ID: "ob-1", CreatedAt: at, Attempts: 10, What: "invoice.paid"}})
	if s := out.String(); !strings.Contains(s, "worker requeue webhook <id>") || strings.Contains(s, "replay") {
		t.Errorf("a failed webhook_outbox row is requeued:\n%s", s)
	}
}
