package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

// Result is what happened to one started row: the outcome its mark
// recorded (or tried to), and why. AfterSend receives it.
type Result struct {
	RowID   string
	Kind    Kind
	Attempt int     // the row's attempts, counting this one
	Outcome Outcome // as marked; OutcomeFailed also when the backoff ran out
	Err     error   // why: the failure behind OutcomeFailed or OutcomeRetry, the skip reason
	RetryIn time.Duration

	// Mark is the mark's own error: nil when recorded, a *StaleMarkError
	// when dropped because the row was no longer pending, else the
	// database error that kept it from running.
	Mark error
}

// attemptRow gives one row its per-row budget and attempts it, under the
// attempt's span: the row's own (tracing.ForRow). Its mark and
// report follow in finishRow, which ends the span.
func (d *Dispatcher) attemptRow(batchCtx context.Context, row *Row, supp *suppressionView) (Result, trace.Span) {
	ctx, opts := tracing.ForRow(batchCtx, row.traceparent)
	ctx, span := d.tracer.Start(ctx, tracing.SpanEmailAttempt, append(opts, trace.WithSpanKind(trace.SpanKindClient))...)
	// Attributes only for a span that records: with tracing off, or the
	// trace not sampled, a row's spans then cost a few hundred ns.
	if span.IsRecording() {
		span.SetAttributes(tracing.RowID.String(row.ID), tracing.Kind.String(string(row.Kind)), tracing.Attempt.Int(row.Attempts))
	}
	rowCtx, cancel := context.WithTimeout(ctx, d.leases.PerRowBudget)
	defer cancel()
	res := Result{RowID: row.ID, Kind: row.Kind, Attempt: row.Attempts}
	res.Outcome, res.Err = d.attempt(rowCtx, row, supp)
	return res, span
}

// finishRow marks an attempted row's outcome, ends the attempt's span
// (carried by ctx) and runs the post-send report. The mark and the report
// run on detached contexts (MarkContext, BounceReportBudget), so ctx only
// carries values.
func (d *Dispatcher) finishRow(ctx context.Context, row *Row, res Result) Result {
	d.record(ctx, row, &res)
	endAttempt(trace.SpanFromContext(ctx), res.Outcome, res.Err)
	d.refusedMailbox(ctx, row, res)
	d.report(ctx, res)
	return res
}

// endAttempt ends an attempt's span with its outcome as marked and, for a
// relay's refusal, the reply code. The error's text stays out of the span:
// a relay's reply can quote the recipient.
func endAttempt(span trace.Span, outcome Outcome, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.Outcome.String(string(outcome)))
	if re, ok := errors.AsType[*smtp.ReplyError](err); ok {
		span.SetAttributes(tracing.SMTPReply.Int(re.Code))
	}
	if outcome == OutcomeFailed || outcome == OutcomeRetry {
		span.SetStatus(codes.Error, string(outcome))
	}
}

// refusedMailbox records a failed row whose relay refused the mailbox for
// good (smtp.ErrBadMailbox: 5.1.1 user unknown and the like) as a hard
// bounce from ProviderSMTP, which puts the address on the suppression list
// with the reply and the row (RecordEvent). It runs after the mark, on a
// context detached from the row's and bounded by SuppressionBudget: the
// failure is recorded whatever happens here, and a lost suppression costs
// one more refused send, not a lost row.
func (d *Dispatcher) refusedMailbox(ctx context.Context, row *Row, res Result) {
	if res.Mark != nil || res.Outcome != OutcomeFailed || !errors.Is(res.Err, smtp.ErrBadMailbox) {
		return
	}
	detail := res.Err.Error()
	if re, ok := errors.AsType[*smtp.ReplyError](res.Err); ok {
		detail = re.Error()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.suppressionBudget)
	defer cancel()
	rec, err := RecordEvent(ctx, d.db, Event{
		RowID:           row.ID,
		Type:            EventBounced,
		BounceClass:     BounceHard,
		Provider:        ProviderSMTP,
		ProviderEventID: row.ID + "/" + strconv.Itoa(row.Attempts),
		Recipient:       row.recipient,
		Detail:          detail,
	}, SuppressionPolicy{})
	if err != nil {
		d.logger.Error("recording the relay's mailbox refusal failed; the address is not suppressed",
			"row_id", row.ID, "error", err.Error())
		return
	}
	d.metrics.CountEvent(rec)
	if rec.Suppressed != nil {
		d.logger.Info("recipient suppressed: the relay refused the mailbox", "row_id", row.ID, "reason", rec.Suppressed.Reason)
	}
}

// attempt runs the steps of one send, each under its sub-budget, and
// classifies the result. A panic anywhere in it is this row's transient
// failure, not the batch's end.
func (d *Dispatcher) attempt(ctx context.Context, row *Row, supp *suppressionView) (outcome Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			d.logger.Error("email row panicked; recorded as a transient failure",
				"row_id", row.ID, "attempt", row.Attempts, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			outcome, err = OutcomeRetry, &engine.PanicError{Value: v}
		}
	}()

	if row.decodeErr != nil {
		if _, ok := errors.AsType[*engine.PanicError](row.decodeErr); ok {
			return OutcomeRetry, row.decodeErr
		}
		return OutcomeFailed, row.decodeErr
	}

	if err = supp.check(ctx, d.db, row.recipient, d.suppressionBudget); err != nil {
		return classify(err), err
	}

	rctx, cancel := context.WithTimeout(ctx, d.brandingBudget)
	msg, err := d.renderer.Render(rctx, row)
	cancel()
	if err != nil {
		return classify(err), fmt.Errorf("render: %w", err)
	}
	msg.RowID, msg.To = row.ID, row.Payload.To
	if err := checkMessage(msg); err != nil {
		return OutcomeFailed, err
	}
	// Just before the send: a suppression added since the claim (a bounce
	// that arrived, an operator's add) stops it.
	if err = supp.recheck(ctx, d.db, row.recipient, d.suppressionMaxAge, d.suppressionBudget); err != nil {
		return classify(err), err
	}

	// The sender splits this between dial (DialBudget) and exchange
	// (min(ExchangeBudget, what is left)).
	sendCtx, cancel := context.WithTimeout(ctx, leases.DialBudget+leases.ExchangeBudget)
	start := time.Now()
	err = d.sender.Send(sendCtx, msg)
	cancel()
	d.metrics.send(time.Since(start), err)
	if err != nil {
		return classify(err), err
	}
	return OutcomeSent, nil
}

// classify maps an error to the outcome it earns (see
// docs/design/outbox-transport.md, Redelivery semantics). STARTTLS refusals
// and forbidden plaintext are configuration problems: transient, so fixing
// the relay resumes delivery without an operator.
func classify(err error) Outcome {
	switch {
	case errors.Is(err, ErrSkip):
		return OutcomeSkipped
	case errors.Is(err, smtp.ErrPermanent):
		return OutcomeFailed
	default:
		return OutcomeRetry
	}
}

// permanentError makes errors.Is(err, smtp.ErrPermanent) true for failures
// the outbox itself knows are final: an undecodable payload, a suppressed
// recipient, a message that would inject headers.
type permanentError struct{ err error }

func (e permanentError) Error() string        { return e.err.Error() }
func (e permanentError) Unwrap() error        { return e.err }
func (e permanentError) Is(target error) bool { return target == smtp.ErrPermanent }

func permanent(err error) error { return permanentError{err} }

// checkMessage refuses a rendered message that cannot be sent as built.
func checkMessage(msg smtp.Message) error {
	switch {
	case hasLineBreak(msg.Subject):
		return permanent(errors.New("header injection: line break in subject"))
	case hasControl(msg.PDFName):
		return permanent(errors.New("header injection: control character in attachment name"))
	case msg.Subject == "":
		return permanent(errors.New("rendered message has no subject"))
	case msg.Text == "" && msg.HTML == "":
		return permanent(errors.New("rendered message has no text or HTML body"))
	}
	return nil
}

// record writes the outcome with its CAS mark and reports it through
// engine.Record, the last stage both transports share: a stale mark is
// logged with the outcome it would have written and counted; any other
// mark error is logged at error level, counted, and returned through
// Result.Mark to its batch (markErrs).
func (d *Dispatcher) record(ctx context.Context, row *Row, res *Result) {
	// A row that is not sent now is going to wait — pending for its backoff
	// slot, or failed until a requeue — and must not wait with plaintext
	// secrets: its mark seals them in the same UPDATE.
	if h := d.hooks.record; h != nil {
		h(row, res)
	}
	seal := noSeal
	if res.Outcome == OutcomeFailed || res.Outcome == OutcomeRetry {
		seal = d.keys.sealWaiting(row, d.secretKeys)
	}
	m, metric := d.markFor(row, res, seal)
	m.Until = row.leaseEnd
	var age time.Duration
	res.Mark = engine.Record(ctx, engine.Report{
		Logger:  d.logger,
		Attrs:   []any{"row_id", row.ID, "kind", string(row.Kind), "attempt", row.Attempts},
		Metrics: d.metrics.engine(),
		Outbox:  table.Name,
		Stale: engine.Line{Msg: "stale email mark dropped: the row was resolved elsewhere",
			Attrs: []any{"outcome", string(res.Outcome), "cause", errString(res.Err)}},
		Lost: engine.Line{Msg: "email mark failed; the row is retried when its lease expires",
			Attrs: []any{"outcome", string(res.Outcome), "cause", errString(res.Err)}},
		Applied: appliedLine(res),
		Observe: func() {
			d.metrics.outcome(metric)
			if res.Outcome == OutcomeSent {
				d.metrics.delivered(age)
			}
		},
	}, func(ctx context.Context) error {
		mctx, span := d.tracer.Start(ctx, tracing.SpanEmailMark)
		if span.IsRecording() {
			span.SetAttributes(tracing.RowID.String(row.ID), tracing.Outcome.String(string(res.Outcome)))
		}
		var err error
		age, err = d.marks.mark(mctx, m)
		endMark(span, err)
		return err
	})
}

// appliedLine is the log line of an email row whose mark applied.
func appliedLine(res *Result) engine.Line {
	switch res.Outcome {
	case OutcomeSent:
		return engine.Line{Level: slog.LevelDebug, Msg: "email sent"}
	case OutcomeSkipped:
		return engine.Line{Level: slog.LevelInfo, Msg: "email skipped by its renderer", Attrs: []any{"reason", errString(res.Err)}}
	case OutcomeFailed:
		return engine.Line{Level: slog.LevelWarn, Msg: "email failed; it waits for an operator's requeue", Attrs: []any{"error", res.Err.Error()}}
	case OutcomeRetry:
		if errors.Is(res.Err, smtp.ErrThrottled) {
			return engine.Line{Level: slog.LevelInfo, Msg: "the relay is throttling; retrying in seconds, not counted toward giving up",
				Attrs: []any{"retry_in", res.RetryIn.Round(time.Millisecond).String(), "error", res.Err.Error()}}
		}
		level := slog.LevelWarn
		if errors.Is(res.Err, smtp.ErrSTARTTLSRefused) || errors.Is(res.Err, smtp.ErrPlaintextForbidden) {
			level = slog.LevelError // a relay or configuration problem someone must fix
		}
		return engine.Line{Level: level, Msg: "email send failed; will retry",
			Attrs: []any{"retry_in", res.RetryIn.Round(time.Second).String(), "error", res.Err.Error()}}
	}
	return engine.Line{}
}

// endMark ends a mark's span: applied, dropped as stale, or failed.
func endMark(span trace.Span, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.MarkApplied.Bool(err == nil))
	if err != nil && !errors.Is(err, claim.ErrStale) {
		span.SetStatus(codes.Error, "mark failed")
	}
}

// markFor decides what the attempt earns (engine.Decide, the decision
// both transports share) and picks the mark of that verdict and the
// outcome metric it counts under. A retry past the last backoff slot
// becomes a failure.
func (d *Dispatcher) markFor(row *Row, res *Result, seal json.RawMessage) (*claim.Mark, string) {
	dec := engine.Decide(d.attemptOf(row, res))
	switch dec.Verdict {
	case engine.Sent:
		return dispatchedMark(row.ID, row.Attempts), metricSent
	case engine.Skipped:
		return skippedMark(row.ID, row.Attempts), metricSkipped
	case engine.Retry:
		res.RetryIn = dec.Wait
		if dec.Class == engine.Throttled {
			return throttledMark(row.ID, row.Attempts, res.RetryIn, res.Err, seal), metricThrottled
		}
		return retryMark(row.ID, row.Attempts, res.RetryIn, res.Err, seal), metricRetried
	}
	if !dec.Exhausted {
		return failedMark(row.ID, row.Attempts, res.Err, seal), metricFailedPermanent
	}
	res.Outcome = OutcomeFailed
	why := fmt.Sprintf("gave up after %d attempts", row.Attempts-row.throttles)
	if row.throttles > 0 {
		why += fmt.Sprintf(" (and %d throttling replies, not counted)", row.throttles)
	}
	res.Err = fmt.Errorf("%s: %w", why, res.Err)
	return failedMark(row.ID, row.Attempts, res.Err, seal), metricFailedExhausted
}

// attemptOf is the row's attempt as the decision reads it: the class of
// its outcome, and the backoff that bounds it. A relay's throttling reply
// waits ThrottleRetry and is not counted toward giving up: the schedule
// judges the attempts less the row's throttles.
func (d *Dispatcher) attemptOf(row *Row, res *Result) engine.Attempt {
	a := engine.Attempt{Class: engine.Permanent, Counted: max(row.Attempts-row.throttles, 1), Backoff: d.backoff}
	switch res.Outcome {
	case OutcomeSent:
		a.Class = engine.Delivered
	case OutcomeSkipped:
		a.Class = engine.Declined
	case OutcomeRetry:
		a.Class = engine.Transient
		if errors.Is(res.Err, smtp.ErrThrottled) {
			a.Class = engine.Throttled
			a.Wait = d.throttleRetry.jittered()
		}
	}
	return a
}

// report runs the AfterSend hook, bounded by BounceReportBudget and shielded
// from its panics.
func (d *Dispatcher) report(rowCtx context.Context, res Result) {
	if d.afterSend == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rowCtx), leases.BounceReportBudget)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			d.logger.Error("email AfterSend hook panicked", "row_id", res.RowID, "panic", fmt.Sprint(v))
		}
	}()
	d.afterSend(ctx, res)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
