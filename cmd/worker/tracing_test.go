package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/postbox/postbox/cmd/worker/internal/telemetry"
	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

func mapLookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// A refused OTEL_* value stops every command as any configuration error
// does: exit 1, one line naming the variable and the value.
func TestTracingBadProtocolStopsTheWorker(t *testing.T) {
	t.Parallel()
	env := map[string]string{telemetry.EnvOTLPEndpoint: "http://127.0.0.1:4318", telemetry.EnvOTLPTracesProtocol: "http/json"}
	var out, errOut bytes.Buffer
	code := runMain([]string{"run"}, mapLookup(env), &out, &errOut)
	want := `worker run: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json": must be http/protobuf or grpc` + "\n"
	if code != 1 || errOut.String() != want {
		t.Fatalf("exit %d, stderr %q; want 1 and %q", code, errOut.String(), want)
	}
}

// The variables the OpenTelemetry SDK reads itself are not "unknown":
// many are a typo away from one LoadConfig reads.
func TestTracingVariablesAreNotFlaggedUnknown(t *testing.T) {
	t.Parallel()
	if got := unknownVariables([]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_EXPORTER_OTLP_INSECURE",
		"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_METRICS_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"}); len(got) != 0 {
		t.Fatalf("unknownVariables flags %+v", got)
	}
	for _, name := range []string{telemetry.EnvOTLPEndpoint, telemetry.EnvOTLPTracesEndpoint, telemetry.EnvOTLPProtocol, telemetry.EnvTracesSampler, telemetry.EnvSDKDisabled, telemetry.EnvServiceName} {
		if !slices.Contains(knownVariables(), name) {
			t.Errorf("%s is not among the variables LoadConfig reads", name)
		}
	}
}

// Log lines carry the trace_id and span_id of the context's span, at the
// top level whatever group or attributes the logger added, through River's
// logger too; a record without a span context has neither.
func TestTracingLogLinesCarryTraceIDs(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	sc := span.SpanContext()
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true}))

	var buf bytes.Buffer
	log := newLogger(&buf, slog.LevelDebug).With("component", "email")
	log.InfoContext(ctx, "with span", "row_id", "r1")
	log.Info("without span")
	log.WithGroup("g").With("k", "v").InfoContext(ctx, "grouped", "n", 1)
	log.DebugContext(remote, "remote parent")
	riverLogger(log).InfoContext(ctx, "producer: Producer job counts")
	lines := logLines(t, &buf)
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), buf.String())
	}
	traceID, spanID := sc.TraceID().String(), sc.SpanID().String()
	for _, i := range []int{0, 2, 4} {
		if lines[i]["trace_id"] != traceID || lines[i]["span_id"] != spanID || lines[i]["component"] != "email" {
			t.Errorf("line %d lacks the span's ids or the logger's attributes: %v", i, lines[i])
		}
	}
	if _, ok := lines[1]["trace_id"]; ok {
		t.Errorf("a line without a span has a trace_id: %v", lines[1])
	}
	if _, ok := lines[1]["span_id"]; ok {
		t.Errorf("a line without a span has a span_id: %v", lines[1])
	}
	if g, _ := lines[2]["g"].(map[string]any); g["k"] != "v" || g["n"] != float64(1) || g["trace_id"] != nil {
		t.Errorf("grouped line: group %v, want k and n in it and the ids outside", lines[2]["g"])
	}
	if lines[3]["trace_id"] != (trace.TraceID{1, 2, 3}).String() || lines[3]["span_id"] != (trace.SpanID{4, 5, 6}).String() {
		t.Errorf("a remote span context's ids are missing: %v", lines[3])
	}
	if lines[4]["level"] != "DEBUG" {
		t.Errorf("River's chatter not demoted: %v", lines[4])
	}
}

// newReplica hands the provider to the email dispatcher and to the webhook
// pipeline: their spans come from it, not from the (no-op) global one,
// and join the trace each row was enqueued in.
func TestTracingReplicaPassesTheProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	sink, err := smtpsink.Start(smtpsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer hook.Close()
	env, err := LoadEnv(mapLookup(map[string]string{"DATABASE_URL": url, "LOG_LEVEL": "error",
		"SMTP_HOST": "127.0.0.1", "SMTP_PORT": fmt.Sprint(sink.Port()), "SMTP_TLS": "none",
		"WEBHOOK_ALLOWED_CIDRS": "127.0.0.0/8"}), io.Discard, io.Discard, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.CreateEndpoint(ctx, pool, webhook.Settings{}, webhook.EndpointParams{URL: hook.URL + "/hook"}); err != nil {
		t.Fatal(err)
	}

	app := sdktrace.NewTracerProvider()
	appCtx, appSpan := app.Tracer("app").Start(ctx, "checkout")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var enq outbox.Enqueuer
	if _, err := enq.Enqueue(appCtx, tx, outbox.Email{CustomerID: "cus_1", Payload: outbox.Payload{To: "ada@example.com", Subject: "Hi", Text: "hello"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := (webhook.Enqueuer{}).EnqueueEvent(appCtx, tx, webhook.Event{Type: "invoice.paid", Payload: []byte(`{"id":"in_1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	appSpan.End()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rep, err := newReplica(env, pool, prometheus.NewRegistry(), replicaOptions{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.close()
	drainCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := rep.dispatcher.Drain(drainCtx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := rep.pipeline.Drain(drainCtx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if sink.Len() != 1 {
		t.Fatalf("relay got %d messages, want 1", sink.Len())
	}
	got := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == appSpan.SpanContext().SpanID() {
			got[s.Name()] = true
		}
	}
	for _, name := range []string{"postbox.email.attempt", "postbox.webhook.fanout"} {
		if !got[name] {
			t.Errorf("no %s span under the enqueuing span from the replica's provider; spans under it: %v", name, got)
		}
	}
}

// endpoints create --traceparent and endpoints traceparent <id> on|off set
// whether an endpoint's attempts carry the header; list shows it.
func TestEndpointsTraceparentCreateSetList(t *testing.T) {
	t.Parallel()
	worker := cliAgainst(pgtest.URL(t))
	code, out, errOut := worker("endpoints", "create", "--url", "https://example.com/in", "--traceparent")
	if code != 0 || !strings.Contains(out, "traceparent  on") {
		t.Fatalf("create --traceparent: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	id := strings.Fields(out)[1]
	_, plain, _ := worker("endpoints", "create", "--url", "https://example.com/other")
	other := strings.Fields(plain)[1]
	if !strings.Contains(plain, "traceparent  off") {
		t.Fatalf("create without --traceparent: %q", plain)
	}
	column := func() map[string]string {
		t.Helper()
		code, list, errOut := worker("endpoints", "list")
		if code != 0 {
			t.Fatalf("list: exit %d, %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(list), "\n")
		col := slices.Index(strings.Fields(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(lines[0],
			"PAUSED UNTIL", "PAUSED_UNTIL"), "IN FLIGHT", "IN_FLIGHT"), " 1H", "_1H")), "TRACEPARENT")
		if col < 0 {
			t.Fatalf("list has no TRACEPARENT column:\n%s", list)
		}
		out := map[string]string{}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			out[f[0]] = f[col]
		}
		return out
	}
	if c := column(); c[id] != "on" || c[other] != "off" {
		t.Fatalf("list shows traceparent %v, want %s on and %s off", c, id, other)
	}
	for _, step := range []struct{ id, state string }{{id, "off"}, {other, "on"}} {
		code, out, errOut := worker("endpoints", "traceparent", step.id, step.state)
		if code != 0 || !strings.Contains(out, "endpoint "+step.id) {
			t.Fatalf("traceparent %s %s: exit %d, stdout %q, stderr %q", step.id, step.state, code, out, errOut)
		}
	}
	if c := column(); c[id] != "off" || c[other] != "on" {
		t.Fatalf("after traceparent off/on, list shows %v", c)
	}
	_, js, _ := worker("endpoints", "list", "--json")
	var health []webhook.Health
	if err := json.Unmarshal([]byte(js), &health); err != nil {
		t.Fatal(err)
	}
	for _, h := range health {
		if h.Endpoint.SendTraceparent != (h.Endpoint.ID == other) {
			t.Errorf("list --json: endpoint %s send_traceparent %v", h.Endpoint.ID, h.Endpoint.SendTraceparent)
		}
	}
	if code, _, errOut := worker("endpoints", "traceparent", id, "yes"); code != 2 || !strings.Contains(errOut, `want on or off`) {
		t.Errorf("traceparent %s yes: exit %d, stderr %q; want 2", id, code, errOut)
	}
	if code, _, errOut := worker("endpoints", "traceparent", "00000000-0000-4000-8000-0000000000e1", "on"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("traceparent of an unknown endpoint: exit %d, stderr %q; want 1, not found", code, errOut)
	}
}

// spanStore keeps the exports a test collector received.
type spanStore struct {
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
}

func (r *spanStore) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
}

// otlpReceiver is an OTLP/HTTP collector: it decodes every export posted
// to /v1/traces and keeps it.
type otlpReceiver struct {
	*httptest.Server
	*spanStore
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{spanStore: &spanStore{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.Error(w, "not an OTLP traces export", http.StatusNotFound)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&export)
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	}))
	t.Cleanup(r.Close)
	return r
}

// grpcReceiver is an OTLP/gRPC collector, in plaintext on a loopback port.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	*spanStore
	addr string
}

func (r *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func startGRPCReceiver(t *testing.T) *grpcReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &grpcReceiver{spanStore: &spanStore{}, addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return r
}

// exported is one span as the receiver got it.
type exported struct {
	Name, TraceID, SpanID, ParentID string
	Attrs, Resource                 map[string]string
	Links                           []string // linked span ids
}

func (r *spanStore) spans() []exported {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []exported
	for _, req := range r.reqs {
		for _, rs := range req.ResourceSpans {
			res := attrMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					e := exported{Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
						ParentID: hex.EncodeToString(s.ParentSpanId), Attrs: attrMap(s.Attributes), Resource: res}
					for _, l := range s.Links {
						e.Links = append(e.Links, hex.EncodeToString(l.SpanId))
					}
					out = append(out, e)
				}
			}
		}
	}
	return out
}

// values is every string in every attribute of every export (resource,
// scope, span, event, link), and every span's name and status message,
// for the secret crawl; also each export as JSON, in case a value hides
// where the walk does not look.
func (r *spanStore) values() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	var walk func(v *commonpb.AnyValue)
	walk = func(v *commonpb.AnyValue) {
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out = append(out, x.StringValue)
		case *commonpb.AnyValue_BytesValue:
			out = append(out, string(x.BytesValue))
		case *commonpb.AnyValue_ArrayValue:
			for _, e := range x.ArrayValue.Values {
				walk(e)
			}
		case *commonpb.AnyValue_KvlistValue:
			for _, kv := range x.KvlistValue.Values {
				out = append(out, kv.Key)
				walk(kv.Value)
			}
		default:
			out = append(out, fmt.Sprint(v.GetValue()))
		}
	}
	kvs := func(list []*commonpb.KeyValue) {
		for _, kv := range list {
			out = append(out, kv.Key)
			walk(kv.Value)
		}
	}
	for _, req := range r.reqs {
		b, _ := protojson.Marshal(req)
		out = append(out, string(b))
		for _, rs := range req.ResourceSpans {
			kvs(rs.GetResource().GetAttributes())
			for _, ss := range rs.ScopeSpans {
				kvs(ss.GetScope().GetAttributes())
				for _, s := range ss.Spans {
					out = append(out, s.Name, s.GetStatus().GetMessage(), s.TraceState)
					kvs(s.Attributes)
					for _, ev := range s.Events {
						out = append(out, ev.Name)
						kvs(ev.Attributes)
					}
					for _, l := range s.Links {
						kvs(l.Attributes)
					}
				}
			}
		}
	}
	return out
}

func attrMap(list []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range list {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		default:
			m[kv.Key] = fmt.Sprint(kv.Value.GetValue())
		}
	}
	return m
}

// stopWorker sends SIGTERM and waits for a clean exit.
func stopWorker(t *testing.T, cmd *exec.Cmd, logs fmt.Stringer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker exited with %v after SIGTERM; output:\n%s", err, logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("worker did not stop within 60 s of SIGTERM; output:\n%s", logs)
	}
}

// TestTracingEndToEnd runs `worker run` as a process exporting to an
// OTLP/HTTP receiver, with two emails — one the relay refuses — and one
// webhook event enqueued inside an application's span. The email's attempt span joins that trace as the
// span's child, names its row, and has the SMTP exchange and the mark
// under it; the event's fan-out, attempt and mark chain joins it too, and
// the receiver gets the attempt's traceparent header; River's job spans
// are exported; the worker's log line for the sent email carries the
// trace's ids; and no exported value — attribute, resource, event — holds
// the SMTP password, the endpoint's signing secret, a secret payload value,
// or the refused send's recipient or reply text.
func TestTracingEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const (
		smtpUser     = "postbox"
		smtpPassword = "smtp-pw-S3CRET-7f3a"
		resetToken   = "reset-S3CRET-91c2"
		pdfBody      = "%PDF-1.4 pdf-S3CRET-body"
		cardValue    = "card-S3CRET-4242"
		refusedTo    = "nobody-s3cret@example.com" // the relay refuses it: a failed send's spans
	)
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	sink, err := smtpsink.Start(smtpsink.Options{Users: map[string]string{smtpUser: smtpPassword}, AllowInsecureAuth: true,
		RejectRcpt: func(to string) error {
			if to == refusedTo {
				return smtpsink.UserUnknown(to)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	otlp := startOTLPReceiver(t)

	var hookMu sync.Mutex
	var hookTraceparents []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		hookMu.Lock()
		hookTraceparents = append(hookTraceparents, r.Header.Get("traceparent"))
		hookMu.Unlock()
	}))
	defer hook.Close()
	ep, err := webhook.CreateEndpoint(ctx, pool, webhook.Settings{}, webhook.EndpointParams{URL: hook.URL + "/hook", SendTraceparent: true})
	if err != nil {
		t.Fatal(err)
	}

	// The application's transaction, inside its own span.
	app := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	appCtx, appSpan := app.Tracer("app").Start(ctx, "checkout")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var enq outbox.Enqueuer
	emailID, err := enq.Enqueue(appCtx, tx, outbox.Email{Kind: outbox.KindPasswordReset, CustomerID: "cus_trace",
		Payload: outbox.Payload{To: "ada@example.com", Subject: "Reset your password",
			PasswordResetURL: "https://app.example/reset?token=" + resetToken, PDF: []byte(pdfBody)}})
	if err != nil {
		t.Fatal(err)
	}
	refusedID, err := enq.Enqueue(appCtx, tx, outbox.Email{CustomerID: "cus_trace",
		Payload: outbox.Payload{To: refusedTo, Subject: "Receipt", Text: "Thank you."}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (webhook.Enqueuer{}).EnqueueEvent(appCtx, tx, webhook.Event{Type: "invoice.paid",
		Payload: []byte(`{"invoice_id":"in_1","card":"` + cardValue + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	appSpan.End()
	traceID, parentID := appSpan.SpanContext().TraceID().String(), appSpan.SpanContext().SpanID().String()

	cmd, logs := startWorker(t, append(poolEnv(t, url, sink),
		"SMTP_USERNAME="+smtpUser, "SMTP_PASSWORD="+smtpPassword, "LOG_LEVEL=debug",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test"), "run")

	// What the trace must hold; each call says what is still missing.
	find := func(spans []exported, name string, match func(exported) bool) (exported, bool) {
		for _, s := range spans {
			if s.Name == name && (match == nil || match(s)) {
				return s, true
			}
		}
		return exported{}, false
	}
	inTrace := func(parent string) func(exported) bool {
		return func(s exported) bool { return s.TraceID == traceID && (parent == "" || s.ParentID == parent) }
	}
	var attempt, fanout, hookAttempt exported
	missing := func() string {
		spans := otlp.spans()
		var ok bool
		if attempt, ok = find(spans, "postbox.email.attempt", func(s exported) bool {
			return inTrace(parentID)(s) && s.Attrs["postbox.row_id"] == emailID
		}); !ok {
			return "postbox.email.attempt with the row id, child of the enqueuing span"
		}
		for _, name := range []string{"smtp.exchange", "postbox.email.mark"} {
			if _, ok := find(spans, name, inTrace(attempt.SpanID)); !ok {
				return name + " under the email attempt"
			}
		}
		refused, ok := find(spans, "postbox.email.attempt", func(s exported) bool {
			return inTrace(parentID)(s) && s.Attrs["postbox.row_id"] == refusedID && s.Attrs["postbox.outcome"] == "failed"
		})
		if !ok {
			return "the refused email's failed attempt"
		}
		if _, ok := find(spans, "smtp.exchange", inTrace(refused.SpanID)); !ok {
			return "smtp.exchange under the refused email's attempt"
		}
		if fanout, ok = find(spans, "postbox.webhook.fanout", inTrace(parentID)); !ok {
			return "postbox.webhook.fanout, child of the enqueuing span"
		}
		if hookAttempt, ok = find(spans, "postbox.webhook.attempt", func(s exported) bool {
			return inTrace(fanout.SpanID)(s) && s.Attrs["postbox.endpoint_id"] == ep.ID
		}); !ok {
			return "postbox.webhook.attempt to the endpoint under the fan-out"
		}
		if _, ok := find(spans, "postbox.webhook.mark", inTrace(hookAttempt.SpanID)); !ok {
			return "postbox.webhook.mark under the webhook attempt"
		}
		for _, s := range spans {
			if strings.HasPrefix(s.Name, "river.work") {
				return ""
			}
		}
		return "a River job span (river.work…)"
	}
	eventually.Explain(t, "every span at the receiver", 2*time.Minute, func() bool { return missing() == "" }, func() string {
		var names []string
		for _, s := range otlp.spans() {
			names = append(names, s.Name+"("+s.TraceID[:8]+")")
		}
		return fmt.Sprintf("the receiver lacks %s; it has %d spans: %v\nworker output:\n%s", missing(), len(names), names, logs)
	})
	stopWorker(t, cmd, logs)

	hookMu.Lock()
	headers := slices.Clone(hookTraceparents)
	hookMu.Unlock()
	if len(headers) == 0 || !strings.HasPrefix(headers[0], "00-"+traceID+"-") {
		t.Errorf("the endpoint got traceparent headers %q, want one in trace %s", headers, traceID)
	}
	if res := attempt.Resource; res["service.name"] != "postbox-worker" || res["service.version"] == "" ||
		res["deployment.environment"] != "test" || res["telemetry.sdk.language"] != "go" {
		t.Errorf("resource %v: want service.name postbox-worker, a service.version, the variable's attribute and the SDK's", res)
	}

	// The log line of the sent email leads to its trace.
	inTraceIDs := map[string]bool{}
	for _, s := range otlp.spans() {
		if s.TraceID == traceID {
			inTraceIDs[s.SpanID] = true
		}
	}
	var sentLine map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "email sent" && m["row_id"] == emailID {
			sentLine = m
		}
		if m["msg"] == "tracing on" && (m["protocol"] != "http/protobuf" || m["endpoint"] != otlp.URL+"/v1/traces" ||
			m["sampler"] != "parentbased_always_on") {
			t.Errorf("boot line %v: want protocol, endpoint and sampler", m)
		}
	}
	if sentLine == nil {
		t.Errorf("no \"email sent\" log line for row %s", emailID)
	} else if id, _ := sentLine["span_id"].(string); sentLine["trace_id"] != traceID || !inTraceIDs[id] {
		t.Errorf("\"email sent\" line %v: want trace_id %s and the span_id of one of its spans", sentLine, traceID)
	}
	if !strings.Contains(logs.String(), `"msg":"tracing on"`) {
		t.Errorf("no \"tracing on\" boot line:\n%s", logs)
	}

	// No secret in any exported value.
	secrets := []string{smtpPassword, ep.Secret, strings.TrimPrefix(ep.Secret, "whsec_"), resetToken, pdfBody,
		base64.StdEncoding.EncodeToString([]byte(pdfBody)), cardValue, refusedTo, "Recipient address rejected"}
	for _, v := range otlp.values() {
		for _, s := range secrets {
			if strings.Contains(v, s) {
				t.Errorf("an exported value holds the secret %q: %.200q", s, v)
			}
		}
	}
	if strings.Contains(logs.String(), smtpPassword) {
		t.Error("the worker logged the SMTP password")
	}
}

// The spans still buffered when SIGTERM arrives are flushed once the
// replica has stopped: with the batch processor's delay an hour, nothing
// is exported while the worker runs, and the email's attempt span arrives
// at shutdown.
func TestTracingFlushedAtShutdown(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	otlp := startOTLPReceiver(t)
	cmd, logs := startWorker(t, append(poolEnv(t, url, sink),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=3600000", "OTEL_SERVICE_NAME=postbox-flush"), "run")
	insertEmails(t, pool, "flush", 1)
	waitEmails(t, pool, 60*time.Second, logs.String)
	if n := len(otlp.spans()); n != 0 {
		t.Fatalf("%d spans exported before shutdown with an hour's delay; the test proves nothing", n)
	}
	stopWorker(t, cmd, logs)
	var names []string
	for _, s := range otlp.spans() {
		names = append(names, s.Name)
		if s.Resource["service.name"] != "postbox-flush" {
			t.Fatalf("span %s has service.name %q, want OTEL_SERVICE_NAME's", s.Name, s.Resource["service.name"])
		}
	}
	if !slices.Contains(names, "postbox.email.attempt") {
		t.Fatalf("after shutdown the receiver has %v, want the email's attempt span flushed\nworker output:\n%s", names, logs)
	}
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over OTLP/gRPC: an http://
// endpoint is dialled in plaintext, and the email's attempt span arrives.
func TestTracingExportsOverGRPC(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	sink, err := smtpsink.Start(smtpsink.Options{DiscardData: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	collector := startGRPCReceiver(t)
	cmd, logs := startWorker(t, append(poolEnv(t, url, sink), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+collector.addr, "OTEL_BSP_SCHEDULE_DELAY=100"), "run")
	insertEmails(t, pool, "grpc", 1)
	eventually.Explain(t, "a postbox.email.attempt span over gRPC", 2*time.Minute, func() bool {
		return slices.ContainsFunc(collector.spans(), func(s exported) bool { return s.Name == "postbox.email.attempt" })
	}, func() string { return fmt.Sprintf("spans: %d\nworker output:\n%s", len(collector.spans()), logs) })
	stopWorker(t, cmd, logs)
	if !strings.Contains(logs.String(), `"protocol":"grpc","endpoint":"http://`+collector.addr+`"`) {
		t.Errorf("boot line lacks the gRPC exporter and its endpoint:\n%s", logs)
	}
}
