package bench

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// otlpSink is an OTLP/HTTP trace receiver in the bench process for the
// traced postbox path: it reads each export and answers 200 with an empty
// ExportTraceServiceResponse (zero bytes of protobuf), counting requests
// and bytes. It decodes nothing, so it costs the machine little more than
// a collector's socket read would.
type otlpSink struct {
	srv             *http.Server
	url             string
	requests, bytes atomic.Int64
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *otlpSink) close() { _ = s.srv.Close() }

// tracingEnv is what a traced worker run adds to its environment: export
// every span (always_on, the costliest sampler) to the sink, in batches
// flushed at the SDK's default interval.
func (s *otlpSink) tracingEnv() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + s.url, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=always_on", "OTEL_SERVICE_NAME=postbox-bench"}
}
