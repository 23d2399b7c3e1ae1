package smtpsink

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/postbox/postbox/internal/tooling/testsupport/eventually"
	"github.com/postbox/postbox/internal/tooling/testsupport/testcert"
)

const msg = "Message-ID: <row-7@example.com>\r\nSubject: =?UTF-8?q?f=C3=A4llig?=\r\n\r\nbody\r\n"

func start(t *testing.T, opts Options) *Sink {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t *testing.T, s *Sink) *gosmtp.Client {
	t.Helper()
	c, err := gosmtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.CommandTimeout, c.SubmissionTimeout = 5*time.Second, 5*time.Second
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSink_RecordsMessages(t *testing.T) {
	t.Parallel()
	s := start(t, Options{})
	c := dial(t, s)
	for range 2 {
		if err := c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(msg)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.WaitFor(ctx, 2); err != nil {
		t.Fatal(err)
	}
	got := s.Messages()
	r := got[0]
	if r.From != "a@example.com" || r.To[0] != "b@example.org" || r.MessageID != "<row-7@example.com>" ||
		r.RowID != "row-7" || r.Subject != "fällig" || r.TLS || r.AuthUser != "" || !strings.Contains(string(r.Data), "body") {
		t.Fatalf("received %+v", r)
	}
	if s.Len() != 2 || s.CountByRowID()["row-7"] != 2 || s.SawMailFrom() != 2 || s.Connections() != 1 {
		t.Fatalf("len %d counts %v mailfrom %d conns %d", s.Len(), s.CountByRowID(), s.SawMailFrom(), s.Connections())
	}

	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := s.WaitFor(short, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor beyond what arrived: %v", err)
	}
}

func TestSink_FaultRejects(t *testing.T) {
	t.Parallel()
	s := start(t, Options{Fault: func(Envelope) error {
		return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}})
	err := dial(t, s).SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(msg))
	var se *gosmtp.SMTPError
	if !errors.As(err, &se) || se.Code != 550 {
		t.Fatalf("err = %v; want 550", err)
	}
	if s.Len() != 0 || s.SawMailFrom() != 1 {
		t.Fatalf("len %d mailfrom %d", s.Len(), s.SawMailFrom())
	}
}

func TestSink_STARTTLSAndAUTH(t *testing.T) {
	t.Parallel()
	b, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{TLSConfig: b.ServerConfig(), Users: map[string]string{"u": "p"}})

	// Without AUTH the sink refuses the mail, as a submission relay would.
	plain := dial(t, s)
	if ok, _ := plain.Extension("AUTH"); ok {
		t.Fatal("AUTH advertised before TLS")
	}
	if err := plain.Mail("a@example.com", nil); err == nil {
		t.Fatal("MAIL accepted without AUTH")
	}

	cfg := b.ClientConfig()
	cfg.ServerName = "localhost"
	c, err := gosmtp.DialStartTLS(s.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Auth(sasl.NewPlainClient("", "u", "p")); err != nil {
		t.Fatal(err)
	}
	if err := c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(msg)); err != nil {
		t.Fatal(err)
	}
	if got := s.Messages(); len(got) != 1 || !got[0].TLS || got[0].AuthUser != "u" {
		t.Fatalf("received %+v", got)
	}
	if s.Connections() != 2 {
		t.Fatalf("%d connections; a STARTTLS upgrade is not a new connection", s.Connections())
	}
}

func TestSink_ImplicitTLS(t *testing.T) {
	t.Parallel()
	b, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{TLSConfig: b.ServerConfig(), ImplicitTLS: true})
	cfg := b.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	c, err := gosmtp.DialTLS(s.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(msg)); err != nil {
		t.Fatal(err)
	}
	if got := s.Messages(); len(got) != 1 || !got[0].TLS {
		t.Fatalf("received %+v", got)
	}

}

// A held reply is released when the connection is dropped or the sink
// closes, so a hanging test never outlives its sink.
func TestSink_HangReleasedByDropAndClose(t *testing.T) {
	t.Parallel()
	held := make(chan struct{}, 2)
	s := start(t, Options{Hang: func(Envelope) bool { held <- struct{}{}; return true }})

	for _, release := range []func(){func() { s.DropConnections() }, func() { s.Close() }} {
		c := dial(t, s)
		done := make(chan error, 1)
		go func() { done <- c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(msg)) }()
		select {
		case <-held:
		case <-time.After(5 * time.Second):
			t.Fatal("Hang was not consulted")
		}
		release()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a held message was accepted")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("held reply not released")
		}
	}
	if s.Len() != 0 {
		t.Fatal("held messages must not be recorded")
	}
}

func TestSink_DataDelayAndPeakConnections(t *testing.T) {
	t.Parallel()
	var g Gauge
	a := start(t, Options{DataDelay: 50 * time.Millisecond, Gauge: &g})
	b := start(t, Options{Gauge: &g})
	ca, cb := dial(t, a), dial(t, b)
	before := time.Now()
	if err := ca.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(msg)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(before); took < 50*time.Millisecond {
		t.Errorf("DATA answered after %s, want at least the 50ms delay", took)
	}
	if at := a.Messages()[0].At; at.Sub(before) < 50*time.Millisecond {
		t.Errorf("accepted %s after the send began, want after the delay", at.Sub(before))
	}
	if err := cb.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(msg)); err != nil {
		t.Fatal(err)
	}
	if a.OpenConnections() != 1 || a.PeakConnections() != 1 || g.Open() != 2 || g.Peak() != 2 {
		t.Fatalf("open %d peak %d, shared open %d peak %d; want 1, 1, 2, 2", a.OpenConnections(), a.PeakConnections(), g.Open(), g.Peak())
	}
	if err := ca.Quit(); err != nil {
		t.Fatal(err)
	}
	eventually.Until(t, "a's connection closed after QUIT", time.Minute, func() bool { return g.Open() == 1 })
	if g.Open() != 1 || g.Peak() != 2 || a.OpenConnections() != 0 {
		t.Fatalf("after QUIT: shared open %d peak %d, a open %d; want 1, 2, 0", g.Open(), g.Peak(), a.OpenConnections())
	}
}
