package smtp

import (
	"testing"

	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/spantest"
)

// A send under an attempt's span is traced step by step as children of
// that span: the dial, STARTTLS and the exchange, whose span says whether
// the connection was reused; a refusal carries the relay's reply code and
// never its text (it quotes the recipient) nor the SMTP password. A second
// send on the pooled connection has no dial.
func TestTracing_SendStepsAreChildrenOfTheAttempt(t *testing.T) {
	t.Parallel()
	bundle, files := newBundle(t)
	sink := startSink(t, smtpsink.Options{
		TLSConfig: bundle.ServerConfig(),
		Users:     map[string]string{"postbox": "s3cret-pw"},
		RejectRcpt: func(to string) error {
			return map[bool]error{true: smtpsink.UserUnknown(to)}[to == "nobody@example.com"]
		},
	})
	cfg := sinkConfig(sink, ModeSTARTTLS)
	cfg.Host = "localhost"
	cfg.CAFile, cfg.Username, cfg.Password = files.CA, "postbox", "s3cret-pw"
	m := newMailer(t, cfg, nil)
	rec := spantest.New(t)

	ctx, attempt := rec.Tracer("test").Start(testCtx(t), tracing.SpanEmailAttempt)
	if err := m.Send(ctx, testMessage("row-1")); err != nil {
		t.Fatal(err)
	}
	refused := testMessage("row-2")
	refused.To = "nobody@example.com"
	if err := m.Send(ctx, refused); err == nil {
		t.Fatal("the refused recipient was accepted")
	}
	attempt.End()

	id := attempt.SpanContext().TraceID()
	for _, tc := range []struct {
		name string
		want int
	}{{tracing.SpanSMTPDial, 1}, {tracing.SpanSMTPStartTLS, 1}, {tracing.SpanSMTPExchange, 2}} {
		spans := rec.Named(id, tc.name)
		if len(spans) != tc.want {
			t.Errorf("%d %s spans, want %d", len(spans), tc.name, tc.want)
		}
		for _, s := range spans {
			if s.Parent().SpanID() != attempt.SpanContext().SpanID() && tc.name != tracing.SpanSMTPStartTLS {
				t.Errorf("%s span's parent is %v, not the attempt", tc.name, s.Parent().SpanID())
			}
		}
	}
	ex := rec.Named(id, tracing.SpanSMTPExchange)
	if len(ex) == 2 && (spantest.Attr(ex[0], tracing.SMTPReused) != "false" || spantest.Attr(ex[1], tracing.SMTPReused) != "true" ||
		spantest.Attr(ex[1], tracing.SMTPReply) != "550" || ex[1].Status().Code == 0) {
		t.Errorf("exchanges: reused %s then %s, second reply %q, status %v; want false, true, 550, an error",
			spantest.Attr(ex[0], tracing.SMTPReused), spantest.Attr(ex[1], tracing.SMTPReused), spantest.Attr(ex[1], tracing.SMTPReply), ex[1].Status())
	}
	if leaks := rec.Leaks("s3cret-pw", "nobody@example.com", "Recipient address rejected"); len(leaks) > 0 {
		t.Errorf("spans carry a secret or the reply's text: %v", leaks)
	}
}
