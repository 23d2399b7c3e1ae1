package telemetry

import (
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// newErrorHandler logs what the SDK cannot handle (an export that
// failed, a full queue) as warnings: the first at once, then at most one
// a minute with the count of those left out, so a collector that is down
// does not flood the log.
func newErrorHandler(log *slog.Logger) otel.ErrorHandler {
	var (
		mu         sync.Mutex
		last       time.Time
		suppressed int
	)
	return otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < time.Minute {
			suppressed++
			mu.Unlock()
			return
		}
		n := suppressed
		last, suppressed = now, 0
		mu.Unlock()
		log.Warn("tracing: spans not exported", "error", err.Error(), "errors_not_logged", n)
	})
}

// sdkLogSink is the SDK's internal logger (otel.SetLogger) on the
// worker's: errors and warnings with their message and error only — the
// SDK attaches the input it could not parse, which can be a header value.
type sdkLogSink struct{ log *slog.Logger }

func (s sdkLogSink) Init(logr.RuntimeInfo) {}

// Enabled admits errors and the SDK's warnings (V(1)); its info and debug
// messages are left out.
func (s sdkLogSink) Enabled(level int) bool { return level <= 1 }

func (s sdkLogSink) Info(_ int, msg string, _ ...any) {
	s.log.Warn("opentelemetry: " + msg)
}

func (s sdkLogSink) Error(err error, msg string, _ ...any) {
	e := ""
	if err != nil {
		e = err.Error()
	}
	s.log.Warn("opentelemetry: "+msg, "error", e)
}

func (s sdkLogSink) WithValues(...any) logr.LogSink { return s }
func (s sdkLogSink) WithName(string) logr.LogSink   { return s }
