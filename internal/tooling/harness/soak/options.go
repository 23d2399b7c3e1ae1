package soak

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Options size and shape a soak. Start from Defaults: zero values are not
// filled in.
type Options struct {
	// WorkerBinary is the postbox worker binary; each worker process is
	// `WorkerBinary run`. Required.
	WorkerBinary string

	Emails    int // email_outbox rows to enqueue
	Events    int // webhook_outbox rows to enqueue
	Endpoints int // webhook endpoints (one receiver each); every event goes to all
	Workers   int // worker processes kept running

	// Chaos is how long workers are killed. The load is enqueued over the
	// first LoadSpread of it, so kills hit rows in flight.
	Chaos      time.Duration
	LoadSpread float64

	// KillEveryMin and KillEveryMax bound the uniformly random wait
	// between two kill -9s during Chaos.
	KillEveryMin, KillEveryMax time.Duration

	// PGRestartAt is when, as a fraction of Chaos, Postgres is restarted
	// (once). Negative: never.
	PGRestartAt float64

	// Timeout bounds the whole run, setup included. Rows still not
	// terminal when it ends count as lost.
	Timeout time.Duration

	// Seed drives the kill schedule and the fault draws; 0 picks one
	// (Tally.Seed reports it, so a run can be repeated).
	Seed uint64

	Faults Faults

	// Env is extra environment for the workers, after the soak's own
	// (later entries win), e.g. to try other lease figures.
	Env []string

	// Progress receives a line per phase and a status line every few
	// seconds; nil discards.
	Progress io.Writer

	// LogDir receives each worker process's log. Empty: a temporary
	// directory, removed at the end unless the run found a problem.
	LogDir string
}

// Faults are the far ends' misbehaviour, as probabilities.
type Faults struct {
	// SMTPPermanent is the share of email rows the sink always answers
	// 550 5.1.1, on every attempt: exactly these rows must end failed.
	SMTPPermanent float64
	// SMTPTransient is the chance that an attempt at any other row is
	// answered 451 4.3.0.
	SMTPTransient float64
	// SMTPHang is the chance that an attempt at any other row never gets
	// a reply to its DATA; the sender's exchange deadline ends it.
	SMTPHang float64
	// WebhookError is the chance that a receiver answers a request 500.
	WebhookError float64
	// WebhookTimeout is the chance that a receiver holds a request past
	// the 13 s delivery budget (then answers 503, unseen).
	WebhookTimeout float64
	// ReplyDelay is how long the sink and the receivers take to answer a
	// message they have already accepted, as a relay that queues before
	// it replies does. A worker killed in that window never learns of the
	// success, so the row is sent again after its lease: this is where
	// crashes turn into duplicates.
	ReplyDelay time.Duration
}

// Defaults are the full-size soak: 10,000 emails, 2,000 events to 3
// endpoints, 3 workers, 90 s of chaos with a kill every 3–6 s, Postgres
// restarted at 40 %.
func Defaults() Options {
	return Options{
		Emails:       10000,
		Events:       2000,
		Endpoints:    3,
		Workers:      3,
		Chaos:        90 * time.Second,
		LoadSpread:   0.75,
		KillEveryMin: 3 * time.Second,
		KillEveryMax: 6 * time.Second,
		PGRestartAt:  0.4,
		Timeout:      10 * time.Minute,
		Faults: Faults{
			SMTPPermanent:  0.01,
			SMTPTransient:  0.10,
			SMTPHang:       0.01,
			WebhookError:   0.05,
			WebhookTimeout: 0.01,
			ReplyDelay:     20 * time.Millisecond,
		},
	}
}

func (o Options) validate() error {
	prob := func(p float64) bool { return p >= 0 && p <= 1 }
	switch {
	case o.WorkerBinary == "":
		return errors.New("soak: Options.WorkerBinary is required")
	case o.Emails < 0 || o.Events < 0 || o.Emails+o.Events == 0:
		return errors.New("soak: enqueue at least one email or event")
	case o.Events > 0 && o.Endpoints < 1:
		return errors.New("soak: events need at least one endpoint")
	case o.Workers < 1:
		return errors.New("soak: at least one worker")
	case o.Chaos < 0 || o.Timeout <= o.Chaos:
		return fmt.Errorf("soak: timeout %s must exceed chaos %s", o.Timeout, o.Chaos)
	case o.LoadSpread < 0 || o.LoadSpread > 1:
		return fmt.Errorf("soak: load spread %v must be in [0, 1]", o.LoadSpread)
	case o.KillEveryMin <= 0 || o.KillEveryMax < o.KillEveryMin:
		return fmt.Errorf("soak: kill interval %s-%s is not a positive range", o.KillEveryMin, o.KillEveryMax)
	case o.PGRestartAt > 1:
		return fmt.Errorf("soak: Postgres restart at %v of the chaos is past its end", o.PGRestartAt)
	case !prob(o.Faults.SMTPPermanent) || !prob(o.Faults.SMTPTransient) || !prob(o.Faults.SMTPHang) ||
		!prob(o.Faults.WebhookError) || !prob(o.Faults.WebhookTimeout) ||
		o.Faults.SMTPTransient+o.Faults.SMTPHang > 1 || o.Faults.WebhookError+o.Faults.WebhookTimeout > 1 ||
		o.Faults.ReplyDelay < 0 || o.Faults.ReplyDelay > 5*time.Second:
		return errors.New("soak: fault rates must be probabilities whose sums stay ≤ 1, the reply delay within 0–5 s")
	}
	return nil
}
