package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A row's traceparent round-trips: what Traceparent writes, WithParent
// reads back as the same trace and span; no span writes nothing, and
// what is not a traceparent (a plain-SQL row's NULL, or text the column's
// CHECK would have refused) gives no parent.
func TestTraceparentRoundTrip(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "enqueue")
	defer span.End()

	got := Traceparent(ctx)
	if len(got) != 55 || got[:3] != "00-" {
		t.Fatalf("Traceparent = %q, want a version 00 traceparent", got)
	}
	back := trace.SpanContextFromContext(WithParent(context.Background(), got))
	if back.TraceID() != span.SpanContext().TraceID() || back.SpanID() != span.SpanContext().SpanID() || !back.IsRemote() {
		t.Errorf("WithParent(%q) = %v, want the enqueue's span as a remote parent", got, back)
	}
	if s := Traceparent(context.Background()); s != "" {
		t.Errorf("Traceparent without a span = %q, want empty", s)
	}
	for _, bad := range []string{"", "not-a-traceparent", "00-00000000000000000000000000000000-b7ad6b7169203331-01"} {
		if sc := trace.SpanContextFromContext(WithParent(context.Background(), bad)); sc.IsValid() {
			t.Errorf("WithParent(%q) gave a parent %v", bad, sc)
		}
	}
}
