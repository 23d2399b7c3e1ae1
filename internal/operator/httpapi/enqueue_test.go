package httpapi

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// An email and an event enqueued over HTTP: 202 with the row's id, the
// row committed by then; retried with the same Idempotency-Key — after a
// lost answer, or racing — one row, one id.
func TestEnqueue_CommittedOnceWithAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	email := map[string]any{"kind": "raw", "customer_id": "cus_1", "priority": "high", "payload": map[string]any{
		"to": "ada@example.com", "subject": "Your receipt", "text": "Thanks.", "plan": "pro"}}
	code, body := f.call(t, http.MethodPost, Prefix+"/emails", f.appKey, email)
	var got enqueued
	decodeJSON(t, body, &got)
	if code != http.StatusAccepted || got.ID == "" {
		t.Fatalf("POST /emails: %d %s", code, body)
	}
	var plan string
	var priority int
	if err := f.Pool.QueryRow(ctx, `SELECT payload->>'plan', priority FROM email_outbox WHERE id = $1 AND status = 'pending'`, got.ID).Scan(&plan, &priority); err != nil || plan != "pro" || priority != 2 {
		t.Fatalf("the answered row is not committed with its payload's own key and its priority: %q, %d, %v", plan, priority, err)
	}

	// Racing retries of one request: one row, every answer its id.
	for _, tc := range []struct {
		path  string
		body  any
		count string
	}{
		{"/emails", email, `SELECT count(*) FROM email_outbox WHERE idempotency_key = 'order-42'`},
		{"/events", map[string]any{"tenant": "acme", "type": "invoice.paid", "payload": map[string]any{"id": "in_42"}},
			`SELECT count(*) FROM webhook_outbox WHERE idempotency_key = 'order-42'`},
	} {
		const n = 8
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				code, body := f.call(t, http.MethodPost, Prefix+tc.path, f.appKey, tc.body, IdempotencyHeader, "order-42")
				var e enqueued
				if code == http.StatusAccepted {
					decodeJSON(t, body, &e)
				}
				ids[i] = e.ID
			})
		}
		wg.Wait()
		for _, id := range ids {
			if id == "" || id != ids[0] {
				t.Fatalf("%s retried %d times with one key answered ids %v, want one id", tc.path, n, ids)
			}
		}
		var rows int
		if err := f.Pool.QueryRow(ctx, tc.count).Scan(&rows); err != nil || rows != 1 {
			t.Fatalf("%s: %d rows for one key (%v), want 1", tc.path, rows, err)
		}
		// A retry after the first answer was lost: the same row again.
		code, body := f.call(t, http.MethodPost, Prefix+tc.path, f.appKey, tc.body, IdempotencyHeader, "order-42")
		if !strings.Contains(body, ids[0]) || code != http.StatusAccepted {
			t.Errorf("%s retried later: %d %s, want 202 with %s", tc.path, code, body, ids[0])
		}
	}
}

// Bad requests name what is wrong — the field, or the byte offset of
// malformed JSON — and write nothing.
func TestEnqueue_BadInputNamesTheField(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	huge := `{"customer_id":"c","payload":{"to":"a@example.com","subject":"s","pdf":"` + base64.StdEncoding.EncodeToString(make([]byte, 40<<20)) + `"}}`
	for _, tc := range []struct {
		name, path string
		body       any
		ctype      string
		code       int
		want       string
	}{
		{"malformed JSON", "/emails", `{"customer_id": "c", "payload": {"to": }`, "", 400, "byte offset 40"},
		{"an unknown field", "/emails", `{"customer_id":"c","payload":{},"priority_x":1}`, "", 400, `"field":"priority_x"`},
		{"a field of the wrong type", "/emails", `{"customer_id":7,"payload":{}}`, "", 400, `"field":"customer_id"`},
		{"no payload", "/emails", `{"customer_id":"c"}`, "", 400, `"field":"payload"`},
		{"a bad recipient", "/emails", `{"customer_id":"c","payload":{"to":"not an address","subject":"s","text":"t"}}`, "", 400, `"field":"payload.to"`},
		{"a priority that is no name", "/emails", `{"customer_id":"c","payload":{"to":"a@example.com","subject":"s","text":"t"},"priority":"urgent"}`, "", 400, `"field":"priority"`},
		{"a priority out of range", "/emails", `{"customer_id":"c","payload":{"to":"a@example.com","subject":"s","text":"t"},"priority":0}`, "", 400, `"field":"priority"`},
		{"a payload key spelling a field", "/emails", `{"customer_id":"c","payload":{"to":"a@example.com","subject":"s","text":"t","TO":"b@example.com"}}`, "", 400, `"field":"payload.data"`},
		{"two documents", "/emails", `{"customer_id":"c","payload":{}} {}`, "", 400, "trailing data"},
		{"an empty body", "/emails", ``, "", 400, "empty"},
		{"not JSON", "/emails", `customer_id=c`, "application/x-www-form-urlencoded", 415, "application/json"},
		{"a body over the cap", "/emails", huge, "", 413, "over"},
		{"an event without a type", "/events", `{"payload":{}}`, "", 400, `"field":"type"`},
		{"an event of a bad tenant", "/events", `{"tenant":"ac\u0001me","type":"t","payload":{}}`, "", 400, `"field":"tenant"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := []string{}
			if tc.ctype != "" {
				headers = []string{"Content-Type", tc.ctype}
			}
			code, body := f.call(t, http.MethodPost, Prefix+tc.path, f.appKey, tc.body, headers...)
			if code != tc.code || !strings.Contains(body, tc.want) || !strings.Contains(body, `"status":`) {
				t.Fatalf("%d %s; want %d naming %s", code, body, tc.code, tc.want)
			}
		})
	}
	var n int
	if err := f.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM email_outbox) + (SELECT count(*) FROM webhook_outbox WHERE tenant_id IS DISTINCT FROM 'acme' AND tenant_id IS DISTINCT FROM 'globex')`).Scan(&n); err != nil || n != 0 {
		t.Errorf("bad requests wrote %d rows (%v)", n, err)
	}
}
