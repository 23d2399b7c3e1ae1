// Package tracing carries a row's W3C trace context from the transaction
// that wrote it to the spans postbox starts for the row, and names those
// spans and their attributes once for both transports.
//
// A row's traceparent column holds the context of the caller's span when
// it enqueued (Traceparent); an attempt's span takes it back as its remote
// parent (WithParent), so the application's trace goes on through the
// send. Spans come from the TracerProvider a Dispatcher is configured
// with, else the global one: without an SDK installed that is OpenTelemetry's
// no-op provider, and nothing is recorded or allocated per span.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine/version"
)

// Name is the instrumentation scope of every postbox span.
const Name = "github.com/postbox/postbox"

// Span names. The same role has the same name in both transports: an
// attempt is one send of one row, its mark the CAS that records it.
const (
	SpanClaim          = "postbox.claim"
	SpanEmailAttempt   = "postbox.email.attempt"
	SpanEmailMark      = "postbox.email.mark"
	SpanWebhookFanOut  = "postbox.webhook.fanout"
	SpanWebhookAttempt = "postbox.webhook.attempt"
	SpanWebhookMark    = "postbox.webhook.mark"
	SpanSMTPDial       = "smtp.dial"
	SpanSMTPStartTLS   = "smtp.starttls"
	SpanSMTPExchange   = "smtp.exchange"
)

// Attribute keys. Ids and counts only: no payload value, address, URL
// query, header or secret is ever an attribute.
const (
	RowID        = attribute.Key("postbox.row_id")
	Kind         = attribute.Key("postbox.kind")
	Attempt      = attribute.Key("postbox.attempt")
	Outcome      = attribute.Key("postbox.outcome")
	MarkApplied  = attribute.Key("postbox.mark.applied")
	EventID      = attribute.Key("postbox.event_id")
	EventType    = attribute.Key("postbox.event_type")
	DeliveryID   = attribute.Key("postbox.delivery_id")
	EndpointID   = attribute.Key("postbox.endpoint_id")
	Deliveries   = attribute.Key("postbox.deliveries")
	Table        = attribute.Key("postbox.table")
	Rows         = attribute.Key("postbox.rows")
	Units        = attribute.Key("postbox.units")
	SMTPReply    = attribute.Key("smtp.reply_code")
	SMTPReused   = attribute.Key("smtp.connection_reused")
	HTTPStatus   = attribute.Key("http.response.status_code")
	ServerAddr   = attribute.Key("server.address")
	ReceiverSees = attribute.Key("postbox.traceparent_sent")
)

var propagator = propagation.TraceContext{}

// scope names the instrumentation's version, read once.
var scope = trace.WithInstrumentationVersion(version.Get().Version)

// Traceparent is the W3C traceparent of ctx's span, for a row's
// traceparent column: "" when ctx carries no valid span context. It is
// always of version 00 in lowercase hex, the format migration 00014's
// CHECK constraints hold plain SQL to.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c.Get("traceparent")
}

// WithParent returns ctx with traceparent as its remote parent span, so a
// span started from it joins the row's trace. "" returns ctx as it is.
func WithParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// ForRow is the context and options of a span that is a row's own: a child
// of the trace the row was enqueued in, or, for a row enqueued outside one,
// the root of a trace of its own — not one more child of the River job
// that claimed it, whose trace would gather every row of a shift. Either
// way it links to the span ctx held (the job's), so both ways lead
// somewhere.
func ForRow(ctx context.Context, traceparent string) (context.Context, []trace.SpanStartOption) {
	var opts []trace.SpanStartOption
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	if traceparent == "" {
		return ctx, append(opts, trace.WithNewRoot())
	}
	return WithParent(ctx, traceparent), opts
}

// Inject writes ctx's span context as a traceparent header into h, for an
// endpoint that asked for it.
func Inject(ctx context.Context, h propagation.TextMapCarrier) { propagator.Inject(ctx, h) }

// Tracer is postbox's tracer from tp; nil means the global provider.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Name, scope)
}

// Step starts the span of one step below an attempt (the SMTP client's
// dial, STARTTLS, exchange), from the provider of ctx's span, for code
// that has no configuration of its own. Under a span that does not record
// — tracing off, or a trace not sampled — it starts nothing and returns
// ctx and that span, whose End does nothing: a step then costs no
// allocation.
func Step(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Name, scope).Start(ctx, name)
}
