package smtp

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

// slack is what a returning Send may take beyond its deadline: scheduling
// under -race on a loaded CI machine, never protocol work.
const slack = time.Second

// A relay that accepts TCP and never greets must not hold a Send beyond
// its deadline, whichever bounds it: the caller's context or the
// exchange budget.
func TestSend_NeverGreets(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	cases := []struct {
		name    string
		setup   func(m *Mailer) (context.Context, context.CancelFunc)
		wantErr error
	}{
		{
			name: "caller deadline shorter than the budget",
			setup: func(*Mailer) (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), bound)
			},
			wantErr: context.DeadlineExceeded,
		},
		{
			name: "exchange budget, caller without deadline",
			setup: func(m *Mailer) (context.Context, context.CancelFunc) {
				m.exchangeBudget = bound // leases.ExchangeBudget, shrunk to keep the test fast
				return context.WithCancel(context.Background())
			},
			wantErr: os.ErrDeadlineExceeded,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			host, port := silentServer(t)
			m := newMailer(t, Config{Host: host, Port: port, Mode: ModeSTARTTLS}, nil)
			ctx, cancel := tc.setup(m)
			defer cancel()

			took, err := returnsWithin(t, bound+5*time.Second, func() error {
				return m.Send(ctx, testMessage("row-1"))
			})
			if took > bound+slack {
				t.Errorf("Send took %s; want about %s", took, bound)
			}
			assertTransient(t, err)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v; want %v in the chain", err, tc.wantErr)
			}
			if errors.Is(err, ErrSTARTTLSRefused) {
				t.Fatalf("a silent relay is a timeout, not a STARTTLS refusal: %v", err)
			}
		})
	}
}

// Cancelling the caller's context aborts an exchange in flight: here the
// relay holds its reply to the message's final dot.
func TestSend_CancelAbortsExchange(t *testing.T) {
	t.Parallel()
	held := make(chan struct{}, 1)
	sink := startSink(t, smtpsink.Options{Hang: func(smtpsink.Envelope) bool {
		held <- struct{}{}
		return true
	}})
	m := newMailer(t, sinkConfig(sink, ModeNone), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-held:
			cancel()
		case <-time.After(testTimeout):
		}
	}()

	took, err := returnsWithin(t, 5*time.Second, func() error { return m.Send(ctx, testMessage("row-1")) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled in the chain", err)
	}
	// The relay has the whole message: cancelled while waiting for its
	// reply, the send is possibly delivered, not retried.
	if !errors.Is(err, ErrPossiblyDelivered) || !errors.Is(err, ErrPermanent) {
		t.Fatalf("err = %v; want ErrPossiblyDelivered (and so ErrPermanent)", err)
	}
	if took > 2*time.Second {
		t.Errorf("Send took %s after cancellation", took)
	}
}

// Once DATA has started the relay may hold the message: a connection that
// dies then is reported, never retried, even when it came from the pool.
// Dying after the final dot, it is reported as possibly delivered.
func TestSend_NoRetryAfterData(t *testing.T) {
	t.Parallel()
	var hangNext atomic.Bool
	held := make(chan struct{}, 1)
	sink := startSink(t, smtpsink.Options{Hang: func(smtpsink.Envelope) bool {
		if hangNext.CompareAndSwap(true, false) {
			held <- struct{}{}
			return true
		}
		return false
	}})
	m := newMailer(t, sinkConfig(sink, ModeNone), nil)
	if err := m.Send(testCtx(t), testMessage("row-1")); err != nil {
		t.Fatal(err)
	}
	hangNext.Store(true)
	go func() {
		select {
		case <-held:
			sink.DropConnections() // the relay dies after the final dot, before replying
		case <-time.After(testTimeout):
		}
	}()
	_, err := returnsWithin(t, 10*time.Second, func() error { return m.Send(testCtx(t), testMessage("row-2")) })
	if !errors.Is(err, ErrPossiblyDelivered) {
		t.Fatalf("err = %v; want ErrPossiblyDelivered: the connection died after the final dot", err)
	}
	if n := sink.SawMailFrom(); n != 2 {
		t.Fatalf("relay saw %d MAIL FROM; want 2 (no retry once DATA started)", n)
	}
}
