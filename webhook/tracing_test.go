package webhook

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/internal/tooling/testsupport/spantest"
)

// An event enqueued inside the application's span is fanned out, attempted
// and marked in that span's trace: fan-out → attempt → mark, the retry's
// attempt too (its parent the enqueue's span, since the retry pass has no
// span of the event's trace). An endpoint that asked for it receives the
// attempt's traceparent; one that did not receives none. No attribute
// carries the endpoint's secret or the payload.
func TestTracing_EventFanOutAttemptsAndMarksJoinTheEnqueueTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	rec := spantest.New(t)
	p := newDispatcher(t, pool, func(c *Config) { c.TracerProvider = rec })
	asked := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError) // the retry lane makes the second attempt
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	plain := newReceiver(t, nil)
	withHeader, err := CreateEndpoint(ctx, pool, Settings{}, EndpointParams{URL: asked.URL, SendTraceparent: true})
	if err != nil {
		t.Fatal(err)
	}
	createEndpoint(t, pool, plain.URL)

	appCtx, app := rec.Tracer("app").Start(ctx, "POST /invoices/pay")
	if err := pgx.BeginFunc(appCtx, pool, func(tx pgx.Tx) error {
		_, err := Enqueuer{}.EnqueueEvent(appCtx, tx, Event{Type: "invoice.paid", Payload: []byte(`{"card":"4242-SECRET"}`)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	app.End()
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_retry_at = now() WHERE status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	if sum, err := p.DrainRetries(ctx, testWindow); err != nil || sum.Sent != 1 {
		t.Fatalf("retry: %+v, %v", sum, err)
	}

	id := app.SpanContext().TraceID()
	fan := rec.Named(id, tracing.SpanWebhookFanOut)
	if len(fan) != 1 || fan[0].Parent().SpanID() != app.SpanContext().SpanID() {
		t.Fatalf("fan-out spans in the enqueue's trace: %d, want 1, child of the enqueue's span", len(fan))
	}
	attempts := rec.Named(id, tracing.SpanWebhookAttempt)
	if len(attempts) != 3 {
		t.Fatalf("%d attempt spans in the enqueue's trace, want 3 (two first attempts, one retry)", len(attempts))
	}
	var retried sdktrace.ReadOnlySpan
	firsts := 0
	for _, a := range attempts {
		switch a.Parent().SpanID() {
		case fan[0].SpanContext().SpanID():
			firsts++
		case app.SpanContext().SpanID():
			retried = a
		default:
			t.Errorf("attempt span %v has parent %v: neither the fan-out nor the enqueue", a.SpanContext().SpanID(), a.Parent().SpanID())
		}
	}
	if firsts != 2 || retried == nil {
		t.Fatalf("%d first attempts under the fan-out (want 2), retry under the enqueue's span: %v", firsts, retried != nil)
	}
	marks := rec.Named(id, tracing.SpanWebhookMark)
	if len(marks) != 3 {
		t.Fatalf("%d mark spans, want 3", len(marks))
	}
	for _, m := range marks {
		if spantest.Find(attempts, m.Parent().SpanID()) == nil || spantest.Attr(m, tracing.MarkApplied) != "true" {
			t.Errorf("mark span: parent %v, applied %s; want an attempt's child, applied", m.Parent().SpanID(), spantest.Attr(m, tracing.MarkApplied))
		}
	}
	if spantest.Attr(retried, tracing.HTTPStatus) != "204" || spantest.Attr(retried, tracing.EndpointID) != withHeader.ID ||
		spantest.Attr(retried, tracing.Attempt) != "2" {
		t.Errorf("the retry's attempt span: status %s, endpoint %s, attempt %s", spantest.Attr(retried, tracing.HTTPStatus),
			spantest.Attr(retried, tracing.EndpointID), spantest.Attr(retried, tracing.Attempt))
	}

	// The receiver that asked sees each attempt's own span as the parent;
	// the other sees no header.
	got := asked.requests()
	if len(got) != 2 {
		t.Fatalf("asking receiver got %d requests, want 2", len(got))
	}
	for _, r := range got {
		sc := trace.SpanContextFromContext(tracing.WithParent(ctx, r.Header.Get("traceparent")))
		if sc.TraceID() != id || spantest.Find(attempts, sc.SpanID()) == nil {
			t.Errorf("traceparent %q: want the enqueue's trace and an attempt's span id", r.Header.Get("traceparent"))
		}
	}
	for _, r := range plain.requests() {
		if h := r.Header.Get("traceparent"); h != "" {
			t.Errorf("an endpoint that did not ask got traceparent %q", h)
		}
	}
	if leaks := rec.Leaks("4242-SECRET", "whsec_"); len(leaks) > 0 {
		t.Errorf("attributes carry a secret: %v", leaks)
	}
}
