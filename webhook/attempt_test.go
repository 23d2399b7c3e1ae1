package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
)

// The receiver verifies every request with the Standard Webhooks reference
// Go library, and sees the headers and body the spec describes.
func TestDelivery_SignatureVerifiedByReferenceLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)

	var verify func(body []byte, h http.Header) error
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		body, _ := io.ReadAll(r.Body)
		if err := verify(body, r.Header); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ep := createEndpoint(t, pool, rc.URL)
	wh, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		t.Fatal(err)
	}
	verify = wh.Verify
	insertOutbox(t, pool, "invoice.paid", map[string]any{"invoice": "in_1", "amount": 4200})

	sum, err := p.Drain(ctx, testWindow)
	if err != nil || sum.Sent != 1 {
		t.Fatalf("ProcessBatch = %+v, %v; want one verified delivery", sum, err)
	}
	r := rc.requests()[0]
	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	for h, want := range map[string]string{
		"Content-Type": "application/json",
		"User-Agent":   DefaultUserAgent,
		HeaderID:       d.EventID,
	} {
		if got := r.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	ts, err := strconv.ParseInt(r.Header.Get(HeaderTimestamp), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp = %q, want the attempt's Unix seconds", r.Header.Get(HeaderTimestamp))
	}
	var body struct {
		Type      string          `json:"type"`
		Timestamp time.Time       `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	if body.Type != "invoice.paid" || body.Timestamp.IsZero() || string(body.Data) != `{"amount":4200,"invoice":"in_1"}` {
		t.Errorf("body = %s, want type, timestamp and the payload as data", r.Body)
	}
}

// A 3xx is the attempt's answer, never followed: the redirect target is
// not hit, and the delivery is retried later like any failure.
func TestDelivery_RedirectNotFollowed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	target := newReceiver(t, nil)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, target.URL+"/moved", http.StatusTemporaryRedirect)
	})
	ep := createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	sum, err := p.Drain(ctx, testWindow)
	if err != nil || sum.Retried != 1 {
		t.Fatalf("ProcessBatch = %+v, %v; want the redirect treated as a transient failure", sum, err)
	}
	if n := len(target.requests()); n != 0 {
		t.Fatalf("redirect target got %d requests, want 0", n)
	}
	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	if d.Status != "pending" || !strings.Contains(str(d.LastError), "307 redirect not followed") {
		t.Fatalf("delivery %s (%s), want pending with the redirect named", d.Status, str(d.LastError))
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_delivery_attempts WHERE delivery_id = $1 AND status_code = 307`, d.ID); n != 1 {
		t.Fatalf("%d attempt rows with status 307, want 1", n)
	}
}

// 410 Gone is permanent: the delivery fails and the endpoint is disabled,
// with the reason stored and counted, and it receives no further events.
func TestDelivery_GoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	reg := prometheus.NewRegistry()
	p := newDispatcher(t, pool, func(o *Config) { o.Metrics = NewMetrics(reg) })
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusGone) })
	ep := createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	sum, err := p.Drain(ctx, testWindow)
	if err != nil || sum.Failed != 1 {
		t.Fatalf("ProcessBatch = %+v, %v; want the delivery failed", sum, err)
	}
	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	if d.Status != "failed" || d.Attempts != 1 || !strings.Contains(str(d.LastError), "410") {
		t.Fatalf("delivery %s after %d attempts (%s), want failed after 1 with 410 named", d.Status, d.Attempts, str(d.LastError))
	}
	eps, err := ListEndpoints(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if eps[0].Enabled || !strings.Contains(eps[0].DisabledReason, "410 Gone") {
		t.Fatalf("endpoint enabled=%v reason=%q, want disabled with the 410 recorded", eps[0].Enabled, eps[0].DisabledReason)
	}
	if got := counterValue(t, reg, "postbox_webhook_endpoints_disabled_total", "gone"); got != 1 {
		t.Fatalf("endpoints disabled counted = %v, want 1", got)
	}

	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 2})
	if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Events != 1 || sum.Sent+sum.Failed+sum.Retried != 0 {
		t.Fatalf("next event: %+v, %v; want it dispatched to nobody", sum, err)
	}
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("receiver got %d requests, want only the first", n)
	}
}

// 429 and 503 with Retry-After are honoured, clamped to [1s, 1h]; other
// statuses follow the schedule.
func TestDelivery_RetryAfterHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter func() string
		want       time.Duration
	}{
		{"429 seconds", http.StatusTooManyRequests, func() string { return "120" }, 120 * time.Second},
		{"503 clamped to an hour", http.StatusServiceUnavailable, func() string { return "999999" }, MaxRetryAfter},
		{"429 clamped to a second", http.StatusTooManyRequests, func() string { return "0" }, MinRetryAfter},
		{"503 HTTP-date", http.StatusServiceUnavailable, func() string { return time.Now().Add(10 * time.Minute).UTC().Format(http.TimeFormat) }, 10 * time.Minute},
		{"500 ignores it", http.StatusInternalServerError, func() string { return "120" }, DefaultBackoff[0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			p := newDispatcher(t, pool, nil)
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
				w.Header().Set("Retry-After", tc.retryAfter())
				w.WriteHeader(tc.status)
			})
			ep := createEndpoint(t, pool, rc.URL)
			insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

			if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Retried != 1 {
				t.Fatalf("ProcessBatch = %+v, %v; want a retry scheduled", sum, err)
			}
			now := dbNow(t, pool)
			d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
			tol := 3 * time.Second
			if tc.status == http.StatusInternalServerError {
				tol = tc.want / 10 // the schedule's jitter
			}
			if d.NextRetryAt == nil || !within(*d.NextRetryAt, now.Add(tc.want), tol+time.Second) {
				t.Fatalf("next_retry_at = %v, want about now + %s", d.NextRetryAt, tc.want)
			}
		})
	}
}

// A 100 KiB answer is read up to 64 KiB and stored as at most 4 KiB of
// valid UTF-8, cut on a rune boundary.
func TestDelivery_ResponseExcerptCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	big := strings.Repeat("€", 100<<10/3) // 3 bytes a rune: 4096 is not a boundary
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(big))
	})
	ep := createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Sent != 1 {
		t.Fatalf("ProcessBatch = %+v, %v; want success", sum, err)
	}
	var excerpt string
	if err := pool.QueryRow(ctx, `SELECT a.response_excerpt FROM webhook_delivery_attempts a
JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = $1`, ep.ID).Scan(&excerpt); err != nil {
		t.Fatal(err)
	}
	if len(excerpt) > maxExcerptBytes || len(excerpt) < maxExcerptBytes-3 {
		t.Fatalf("stored excerpt is %d bytes, want at most %d and no shorter than a rune less", len(excerpt), maxExcerptBytes)
	}
	if !utf8.ValidString(excerpt) || !strings.HasPrefix(big, excerpt) {
		t.Fatal("stored excerpt is not a valid UTF-8 prefix of the body")
	}
}

// Every network call has a deadline: a receiver that never answers costs
// one DeliveryBudget, and the attempt is retried.
func TestDelivery_TimeoutIsTransient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	lc := leases.Default()
	lc.DeliveryBudget = 300 * time.Millisecond
	p := newDispatcher(t, pool, func(o *Config) { o.Leases = lc })
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	ep := createEndpoint(t, pool, rc.URL)
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	start := time.Now()
	sum, err := p.Drain(ctx, testWindow)
	if err != nil || sum.Retried != 1 {
		t.Fatalf("ProcessBatch = %+v, %v; want a retry scheduled", sum, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("ProcessBatch took %s with a 300ms budget", took)
	}
	d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID)
	if !strings.Contains(str(d.LastError), "no answer within the 300ms delivery budget") {
		t.Fatalf("last_error = %q, want the budget named", str(d.LastError))
	}
}

func TestExcerpt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, ""},
		{"short", []byte(`{"ok":true}`), `{"ok":true}`},
		{"invalid utf-8 replaced", []byte{'a', 0xff, 'b'}, "a\uFFFDb"},
		{"NUL dropped", []byte("a\x00b"), "ab"},
		{"exactly the cap", []byte(strings.Repeat("x", maxExcerptBytes)), strings.Repeat("x", maxExcerptBytes)},
		{"cut on a rune boundary", []byte("x" + strings.Repeat("é", maxExcerptBytes)), "x" + strings.Repeat("é", (maxExcerptBytes-1)/2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := excerpt(tc.in); got != tc.want {
				t.Fatalf("excerpt = %.40q… (%d bytes), want %.40q… (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
		})
	}
}

// With APP_ENV=production an http endpoint that predates the rule (or was
// inserted by SQL) is failed at delivery time, not sent in clear.
func TestDelivery_ProductionRefusesPlainHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, func(o *Config) { o.Settings.Production = true })
	rc := newReceiver(t, nil)
	ep := createEndpoint(t, pool, rc.URL) // created outside production
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})

	if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Failed != 1 {
		t.Fatalf("ProcessBatch = %+v, %v; want the delivery failed", sum, err)
	}
	if d := oneDelivery(t, pool, `endpoint_id = $1`, ep.ID); !strings.Contains(str(d.LastError), "must be https") {
		t.Fatalf("last_error = %q, want the https rule named", str(d.LastError))
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("receiver got %d plain-http requests in production", n)
	}
}
