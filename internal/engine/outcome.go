package engine

import (
	"errors"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/leases"
)

// Verdict is what an attempt's mark records, in the engine's words. Each
// transport spells it in its own Outcome (outbox.OutcomeSent is "sent",
// webhook.OutcomeSent "succeeded"); the decision, the tally and the
// metric's label are taken from the verdict, the same way for both.
type Verdict uint8

const (
	Sent    Verdict = iota + 1 // the relay or the receiver accepted it
	Skipped                    // the transport declined to send it (an email's renderer)
	Retry                      // stays pending until its wait has passed
	Failed                     // failed for good: waits for an operator's requeue
)

// Class is a transport's reading of one attempt's result: the one
// judgement that stays with the transport (an SMTP reply, an HTTP status
// mean different things). Decide turns it into a Verdict.
type Class uint8

const (
	Delivered Class = iota + 1 // accepted
	Declined                   // not sent, on purpose
	Permanent                  // retrying cannot help
	Transient                  // retried on the backoff schedule; failed once it is spent
	NamedWait                  // transient, and the other side named the wait (Retry-After): still bounded by the schedule
	Throttled                  // retried after Attempt.Wait, not counted toward giving up (a relay's throttling, a held endpoint)
)

// Attempt is what a transport hands the decision about one attempt, as
// plain data: its class, the wait it was told, and the schedule that
// bounds it. The schedule's slots are the attempt limit: an attempt past
// them fails the row.
type Attempt struct {
	Class   Class
	Wait    time.Duration  // NamedWait and Throttled: the wait to keep
	Counted int            // the attempts the schedule judges, this one included (1-based)
	Backoff leases.Backoff // the transport's retry schedule
}

// Decision is what Decide made of an Attempt: the verdict the mark
// records and, for a retry, its wait. Exhausted is a transient failure
// the schedule had no slot left for; each transport words its "gave up"
// in the row's error.
type Decision struct {
	Verdict   Verdict
	Wait      time.Duration
	Class     Class
	Exhausted bool
}

// Decide is the one retry-or-fail decision of both transports: a
// transient failure waits its schedule's next slot, or the wait it was
// named, until the slots run out, and then fails; a throttled one waits
// what it was told and never runs the schedule down.
func Decide(a Attempt) Decision {
	d := Decision{Class: a.Class}
	switch a.Class {
	case Delivered:
		d.Verdict = Sent
	case Declined:
		d.Verdict = Skipped
	case Permanent:
		d.Verdict = Failed
	case Throttled:
		d.Verdict, d.Wait = Retry, a.Wait
	default: // Transient, NamedWait
		if a.Counted < 1 || a.Counted > len(a.Backoff) {
			d.Verdict, d.Exhausted = Failed, true
			return d
		}
		d.Verdict, d.Wait = Retry, a.Wait
		if a.Class != NamedWait {
			d.Wait, _ = a.Backoff.Next(a.Counted)
		}
	}
	return d
}

// Count adds one started row's recorded attempt to t, the one count of
// both transports: the verdict its mark recorded (cause is the failure
// behind a Failed or Retry), or — when the mark did not apply — a stale
// mark (claim.ErrStale) or a mark error. Panics are counted where they
// are recovered.
func (t *Tally) Count(id string, v Verdict, cause string, mark error) {
	t.Started++
	switch {
	case errors.Is(mark, claim.ErrStale):
		t.Stale++
		return
	case mark != nil:
		t.MarkErrors++
		t.NoteError(mark.Error())
		return
	}
	switch v {
	case Sent:
		t.Sent++
		t.SentIDs = append(t.SentIDs, id)
	case Skipped:
		t.Skipped++
	case Failed:
		t.Failed++
		t.FailedIDs = append(t.FailedIDs, id)
		t.NoteError(cause)
	case Retry:
		t.Retried++
		t.FailedIDs = append(t.FailedIDs, id)
		t.NoteError(cause)
	}
}
