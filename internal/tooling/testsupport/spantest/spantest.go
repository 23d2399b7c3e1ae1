// Package spantest records the spans a test's code ends, with the
// OpenTelemetry SDK's in-memory recorder, and reads them back by name,
// parent and attribute.
package spantest

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Recorder is a TracerProvider whose ended spans a test can read.
type Recorder struct {
	*sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

// New returns a Recorder that samples every span.
func New(t *testing.T) *Recorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return &Recorder{TracerProvider: tp, rec: rec}
}

// Named returns the ended spans of trace id called name, in the order they
// ended.
func (r *Recorder) Named(id trace.TraceID, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if s.SpanContext().TraceID() == id && s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Ended is every ended span.
func (r *Recorder) Ended() []sdktrace.ReadOnlySpan { return r.rec.Ended() }

// Attr is span s's attribute k as text, "" when it has none.
func Attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// Find is the span of spans whose span id is id, or nil.
func Find(spans []sdktrace.ReadOnlySpan, id trace.SpanID) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.SpanContext().SpanID() == id {
			return s
		}
	}
	return nil
}

// Leaks names, for each ended span, every attribute and every event
// (its name and attributes: RecordError's exception.message is the
// error's text) whose value contains one of secrets.
func (r *Recorder) Leaks(secrets ...string) []string {
	var out []string
	leaks := func(where, value string) {
		for _, secret := range secrets {
			if strings.Contains(value, secret) {
				out = append(out, where)
			}
		}
	}
	for _, s := range r.rec.Ended() {
		for _, kv := range s.Attributes() {
			leaks(s.Name()+" "+string(kv.Key), kv.Value.String())
		}
		for _, ev := range s.Events() {
			leaks(s.Name()+" event "+ev.Name, ev.Name)
			for _, kv := range ev.Attributes {
				leaks(s.Name()+" event "+ev.Name+" "+string(kv.Key), kv.Value.String())
			}
		}
		if strings.Contains(s.Status().Description, "@") {
			out = append(out, s.Name()+" status: "+s.Status().Description)
		}
	}
	return out
}
