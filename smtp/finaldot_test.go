package smtp

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

// TestSend_FinalDotUnansweredIsPossiblyDelivered locks the unanswered final
// dot in smtp/: a relay that takes the whole message and never answers its
// final dot is reported as possibly delivered — ErrPossiblyDelivered, which
// also matches ErrPermanent so the outbox does not send it again — with a
// text telling the operator what to check, and the relay saw exactly one
// copy.
func TestSend_FinalDotUnansweredIsPossiblyDelivered(t *testing.T) {
	t.Parallel()
	var copies atomic.Int32
	sink := startSink(t, smtpsink.Options{Hang: func(smtpsink.Envelope) bool {
		copies.Add(1)
		return true
	}})
	m := newMailer(t, sinkConfig(sink, ModeNone), nil)
	m.exchangeBudget = 300 * time.Millisecond // leases.ExchangeBudget, shrunk; the caller has no deadline

	_, err := returnsWithin(t, 10*time.Second, func() error { return m.Send(context.Background(), testMessage("row-1")) })
	if !errors.Is(err, ErrPossiblyDelivered) || !errors.Is(err, ErrPermanent) {
		t.Fatalf("err = %v; want ErrPossiblyDelivered and ErrPermanent", err)
	}
	var pd *PossiblyDeliveredError
	if !errors.As(err, &pd) || pd.Waited <= 0 {
		t.Fatalf("err = %#v; want a *PossiblyDeliveredError with the time waited", err)
	}
	for _, want := range []string{"possibly delivered: the relay did not answer the final dot within", "check the recipient before requeueing", "reply to the final dot"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q; want it to contain %q", err, want)
		}
	}
	if n := copies.Load(); n != 1 {
		t.Fatalf("the relay was handed %d copies; want 1", n)
	}
}

// A reply to the final dot that comes after the exchange budget but within
// the caller's deadline is awaited: the reply may use all the send has
// left, so a slow relay's acceptance is recorded as a send.
func TestSend_FinalDotReplyMayUseTheCallersWholeDeadline(t *testing.T) {
	t.Parallel()
	const budget = 200 * time.Millisecond
	sink := startSink(t, smtpsink.Options{Fault: func(smtpsink.Envelope) error {
		time.Sleep(3 * budget) // simulates: a relay answering the dot well after the exchange deadline
		return nil
	}})
	m := newMailer(t, sinkConfig(sink, ModeNone), nil)
	m.exchangeBudget = budget
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := returnsWithin(t, 35*time.Second, func() error { return m.Send(ctx, testMessage("row-1")) }); err != nil {
		t.Fatalf("Send = %v; want the late 250 to the final dot accepted", err)
	}
	if n := sink.Len(); n != 1 {
		t.Fatalf("sink has %d messages; want 1", n)
	}
}

// A reply to the final dot, even a refusal, is a reply: classified as
// usual, not "possibly delivered".
func TestSend_FinalDotRefusalIsNotPossiblyDelivered(t *testing.T) {
	t.Parallel()
	sink := startSink(t, smtpsink.Options{Fault: func(smtpsink.Envelope) error {
		return errors.New("queue full")
	}})
	m := newMailer(t, sinkConfig(sink, ModeNone), nil)
	err := m.Send(testCtx(t), testMessage("row-1"))
	if err == nil || errors.Is(err, ErrPossiblyDelivered) {
		t.Fatalf("err = %v; want a refusal, not possibly delivered", err)
	}
}
