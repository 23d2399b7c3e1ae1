package main

import (
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/trace"
)

// riverTracing is River's own tracing when tp is set: a span per job
// worked (river.work/<kind>) and per insert, from otelriver. Nil adds
// nothing. The provider itself, from the OTEL_* variables, is
// internal/telemetry's.
func riverTracing(tp trace.TracerProvider) []rivertype.Middleware {
	if tp == nil {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              tp,
		EnableWorkSpanJobKindSuffix: true,
	})}
}
