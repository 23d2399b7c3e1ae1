package smtp

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDialBudget_BoundsTheDial locks the 10 s dial budget, leases.DialBudget
// (shrunk here; see docs/design/outbox-transport.md, Derived constants): a
// relay that takes the TCP connection but never completes the TLS handshake
// (SMTP_TLS=tls, where the handshake is part of the dial) — and one whose
// accept queue is full, so the TCP connect itself never completes — must cost
// a Send one dial budget, not whatever the caller allows (the outbox gives a
// send 40 s). The greeting that follows a dial is the exchange budget's
// (TestSend_NeverGreets).
func TestDialBudget_BoundsTheDial(t *testing.T) {
	t.Parallel()
	const budget = 300 * time.Millisecond
	cases := []struct {
		name  string
		relay func(t *testing.T) (host string, port int)
		mode  Mode
	}{
		{"TLS handshake never answered", silentServer, ModeTLS},
		{"TCP connect never accepted", fullBacklog, ModeSTARTTLS},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			host, port := tc.relay(t)
			m := newMailer(t, Config{Host: host, Port: port, Mode: tc.mode}, nil)
			m.dialBudget = budget
			// The caller's deadline is far off, as the outbox's is: only the
			// dial budget can end this Send soon.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			_, err := returnsWithin(t, 20*time.Second, func() error {
				return m.Send(ctx, testMessage("row-1"))
			})
			assertTransient(t, err)
			// The dialer reports its context's deadline as a net timeout.
			var timeout net.Error
			if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &timeout) && timeout.Timeout()) || !strings.Contains(err.Error(), ": dial: ") {
				t.Fatalf("err = %v; want the dial's deadline", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("the caller's context ended (%v): the dial budget did not bound the dial", ctx.Err())
			}
		})
	}
}
