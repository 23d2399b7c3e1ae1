package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/pgtext"
	"github.com/postbox/postbox/internal/engine/tracing"
	"github.com/postbox/postbox/leases"
)

// delivery is one webhook_deliveries row ready for an attempt: what was
// born or claimed, plus what the request needs.
type delivery struct {
	id, eventID, endpointID string
	url, secret             string
	enabled                 bool
	event                   event // what is sent, shared by all the event's deliveries
	attempt                 int   // webhook_deliveries.attempts when born or claimed
	leaseEnd                time.Time

	// leased is false for a delivery born held (bornDeliveriesSQL): the
	// retry lane makes its first attempt, through admission.
	leased bool
	// olderSecrets are the endpoint's rotated-out secrets still active,
	// newest first: each signs the request too (secrets.go).
	olderSecrets []string
	// sendTraceparent is the endpoint's choice to receive the attempt's
	// trace context as a traceparent header.
	sendTraceparent bool
	// orderingKey is the delivery's key ("" for none): once delivered, it
	// hands the key on to the next (attemptUnit.Run).
	orderingKey string
	orderingSeq int64 // its place in the key
	// waits is true for a delivery born held for its key's order alone:
	// the mark of the delivery it waits for hands the key on to it, so no
	// retry lane needs waking. raced is true when that mark may have
	// missed its birth (bornColumns): takeRaced looks again.
	waits, raced bool
	// share is the share key of the outbox row a fan-out made it from
	// (shareKeySQL); a retry's is unknown, "".
	share string
}

// event is one event as its deliveries send it: the body every endpoint
// receives, and the creation time that body carries, kept apart for the
// enqueue→delivered latency so no attempt has to parse the body back.
type event struct {
	body        []byte
	createdAt   time.Time
	traceparent string // its attempts' spans join this trace (internal/engine/tracing)
}

// newEvent builds the Standard Webhooks payload shape of an event. It is
// built from stored columns only, so every attempt sends the same bytes;
// only the signature's timestamp changes.
// traceparent is the trace the event was enqueued in ("" for none).
func newEvent(eventType string, createdAt time.Time, payload []byte, traceparent string) (event, error) {
	body, err := json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp time.Time       `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{eventType, createdAt.UTC(), payload})
	return event{body: body, createdAt: createdAt, traceparent: traceparent}, err
}

// startBy is the last moment d's attempt may start: an attempt must
// finish, its mark included, before d's lease expires — otherwise the retry
// worker may claim the row while the attempt is still running and POST it
// twice — so it must start early enough for a whole DeliveryBudget plus
// MarkTimeout inside the lease.
func (p *Dispatcher) startBy(d delivery) time.Time {
	return d.leaseEnd.Add(-(p.lc.DeliveryBudget + leases.MarkTimeout))
}

// mayStart reports whether d's attempt may start now.
func (p *Dispatcher) mayStart(d delivery) bool {
	return !time.Now().After(p.startBy(d)) && !p.stopped.Load()
}

// attempt makes one attempt at d, records it with markDelivery, and
// returns what happened as a one-row Tally. fanOut is the span of the
// fan-out that made a first attempt's delivery, whose child its span is; a
// retry's span (no fanOut) joins the event's own trace (tracing.ForRow).
// Its mark is the attempt's last step.
//
// handOn asks the mark of a delivered ordered delivery to claim the next
// of its key (handOnCTE); next is what it claimed, in order, none when
// it claimed nothing.
func (p *Dispatcher) attempt(ctx context.Context, d delivery, fanOut trace.SpanContext, handOn bool) (t Tally, next []handedOn) {
	return p.finish(p.try(ctx, d, fanOut), handOn, nil)
}

// tried is an attempt whose request is over and whose mark is still to be
// written (finish); its span ends with the mark.
type tried struct {
	ctx  context.Context // carries the attempt's span
	span trace.Span
	d    delivery
	mark Result
	c    classed
	gone bool // the receiver answered 410 Gone
}

// classed is an attempt's result as webhook reads it: the class and the
// wait the decision (engine.Decide) takes from it, with the schedule.
type classed struct {
	class engine.Class
	wait  time.Duration // a Retry-After's
}

// accepted reports whether the receiver took the delivery (a 2xx).
func (a *tried) accepted() bool { return a.c.class == engine.Delivered }

// try makes the request of d's attempt (attempt's first half).
func (p *Dispatcher) try(ctx context.Context, d delivery, fanOut trace.SpanContext) *tried {
	var opts []trace.SpanStartOption
	if fanOut.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, fanOut)
	} else {
		ctx, opts = tracing.ForRow(ctx, d.event.traceparent)
	}
	ctx, span := p.tracer.Start(ctx, tracing.SpanWebhookAttempt, append(opts, trace.WithSpanKind(trace.SpanKindClient))...)
	if span.IsRecording() { // attributes cost nothing when it does not
		span.SetAttributes(tracing.DeliveryID.String(d.id), tracing.EventID.String(d.eventID),
			tracing.EndpointID.String(d.endpointID), tracing.Attempt.Int(d.attempt), tracing.ReceiverSees.Bool(d.sendTraceparent))
	}
	a := &tried{ctx: ctx, span: span, d: d}
	switch {
	case !d.enabled:
		// No request: the endpoint was disabled after the delivery was
		// claimed or born. It stays pending, held — the claim skips a
		// disabled endpoint's rows — and goes out when the endpoint is
		// enabled again.
		// held: a wait of none, not counted toward giving up.
		a.mark, a.c = Result{Error: heldDisabled}, classed{class: engine.Throttled}
	case checkEndpointURL(d.url, p.cfg.Production) != nil:
		// The rules hold for endpoint rows written by SQL too.
		a.mark, a.c = Result{Error: checkEndpointURL(d.url, p.cfg.Production).Error()}, classed{class: engine.Permanent}
	default:
		if h := p.hooks.beforeAttempt; h != nil {
			h(d.id)
		}
		done := p.metrics.attemptInFlight(d.endpointID)
		a.mark, a.c, a.gone = p.send(ctx, d)
		done()
		p.metrics.attemptDuration(a.mark.Duration.Seconds())
	}
	return a
}

// finish records a tried attempt (attempt's second half): its mark hands
// an ordered key on past the deliveries ahead that the attempt's unit
// leased and has not sent yet.
func (p *Dispatcher) finish(a *tried, handOn bool, ahead []string) (t Tally, next []handedOn) {
	defer a.span.End()
	t, next = p.record(a.ctx, a.d, &a.mark, a.c, a.gone, handOn, ahead)
	if a.span.IsRecording() {
		a.span.SetAttributes(tracing.Outcome.String(string(a.mark.Outcome)))
		if a.mark.StatusCode != 0 {
			a.span.SetAttributes(tracing.HTTPStatus.Int(a.mark.StatusCode))
		}
		if a.mark.Outcome != OutcomeSent {
			a.span.SetStatus(codes.Error, string(a.mark.Outcome))
		}
	}
	return t, next
}

// record decides an attempt's outcome (decide), writes its mark and
// reports it through engine.Record (the stage both transports share),
// counts it, and disables the endpoint after a 410.
func (p *Dispatcher) record(ctx context.Context, d delivery, mark *Result, c classed, gone, handOn bool, ahead []string) (Tally, []handedOn) {
	p.decide(mark, c)
	if h := p.hooks.beforeMark; h != nil {
		h(d.id)
	}
	log := p.logger.With("delivery_id", d.id, "event_id", d.eventID, "endpoint_id", d.endpointID, "attempt", d.attempt)
	// The receiver's text (a Location header, a wrapped error) can be
	// megabytes: capped once here, it is the same in the row, the attempt
	// log, the log lines and the Tally.
	mark.Error = pgtext.LastError(mark.Error)
	mark.Until = d.leaseEnd
	var out Tally
	// A mark that hands an ordered key on does the next delivery's claim
	// too, in the group commit like every mark: measured with 64 keys on
	// 48 slots, marks on connections of their own cost a commit each and
	// ran ordered delivery at 0.76× the unordered rate, against about 0.9×
	// in the group (docs/PERFORMANCE.md, Ordered delivery).
	var lease time.Duration
	if handOn && d.orderingKey != "" && mark.Outcome == OutcomeSent {
		lease = p.lc.RetryClaimLease(1)
	}
	sent := time.Now()
	var (
		breaker breakerOutcome
		next    []handedOn
	)
	err := engine.Record(ctx, engine.Report{
		Logger:  log,
		Metrics: p.metrics.engine(),
		Outbox:  deliveriesTable.Name,
		Stale: engine.Line{Msg: "stale delivery mark dropped: a sibling resolved the delivery first",
			Attrs: []any{"would_mark", string(mark.Outcome), "status_code", mark.StatusCode}},
		Lost: engine.Line{Msg: "delivery mark lost; the delivery is attempted again when its lease expires",
			Attrs: []any{"would_mark", string(mark.Outcome)}},
		Applied: attemptLine(*mark),
		Observe: func() {
			switch mark.Outcome {
			case OutcomeSent:
				p.metrics.delivery("succeeded")
				p.metrics.delivered(d.event.createdAt)
			case OutcomeRetry:
				p.metrics.delivery("retried")
			case OutcomeFailed:
				p.metrics.delivery("failed")
			}
		},
	}, func(ctx context.Context) error {
		mctx, span := p.tracer.Start(ctx, tracing.SpanWebhookMark)
		var err error
		breaker, next, err = markDelivery(mctx, p.pool, p.marks, d.id, *mark, &breakerCount{endpointID: d.endpointID, url: d.url, counts: !gone, settings: p.cfg, handOn: lease, ahead: ahead})
		if span.IsRecording() {
			span.SetAttributes(tracing.DeliveryID.String(d.id), tracing.Outcome.String(string(mark.Outcome)), tracing.MarkApplied.Bool(err == nil))
			if err != nil && !errors.Is(err, ErrStaleMark) {
				span.SetStatus(codes.Error, "mark failed")
			}
		}
		span.End()
		return err
	})
	for i := range next {
		next[i].sent = sent
	}
	out.Count(d.id, verdicts[mark.Outcome], mark.Error, err)
	if breaker.opsRefused {
		p.opsRefused(EventDeliveryExhausted, d.endpointID, "the operator endpoint belongs to a tenant")
	}
	if gone {
		p.disableGone(ctx, d, log)
	} else {
		p.noteOutcome(ctx, d, breaker, log)
	}
	return out, next
}

// heldDisabled is the last_error of a delivery held for a disabled endpoint.
const heldDisabled = "endpoint disabled: held until it is enabled again"

// attemptLine is the log line of a delivery whose mark applied.
func attemptLine(m Result) engine.Line {
	attrs := []any{"outcome", string(m.Outcome), "status_code", m.StatusCode, "duration", m.Duration}
	switch m.Outcome {
	case OutcomeSent:
		return engine.Line{Level: slog.LevelDebug, Msg: "webhook delivered", Attrs: attrs}
	case OutcomeRetry:
		return engine.Line{Level: slog.LevelInfo, Msg: "webhook attempt failed; will retry", Attrs: append(attrs, "retry_in", m.RetryIn.Round(time.Millisecond).String(), "error", m.Error)}
	default:
		return engine.Line{Level: slog.LevelWarn, Msg: "webhook delivery failed for good", Attrs: append(attrs, "error", m.Error)}
	}
}

// send POSTs d's body with fresh Standard Webhooks headers and classifies
// the answer. gone reports a 410, which disables the endpoint.
//
//	2xx                         succeeded
//	410 Gone                    failed; endpoint disabled
//	SSRF refusal, bad url/secret failed (permanent: retrying cannot help)
//	429/503 with Retry-After    pending, retried after the header's wait (clamped)
//	3xx (never followed), other non-2xx, network error, timeout
//	                            pending on the schedule; failed once it is spent
func (p *Dispatcher) send(ctx context.Context, d delivery) (m Result, c classed, gone bool) {
	m.Attempt = d.attempt
	keys, err := signingKeys(d.secret, d.olderSecrets)
	if err != nil {
		m.Error = "endpoint secret unusable: " + err.Error()
		return m, classed{class: engine.Permanent}, false
	}
	ctx, cancel := context.WithTimeout(ctx, p.lc.DeliveryBudget)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.event.body))
	if err != nil {
		m.Error = "endpoint url unusable: " + redactedURLError(err).Error()
		return m, classed{class: engine.Permanent}, false
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", p.cfg.UserAgent)
	req.Header.Set(HeaderID, d.eventID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, signAll(keys, d.eventID, now, d.event.body))
	if d.sendTraceparent {
		tracing.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}

	resp, err := p.client.Do(req)
	if err != nil {
		m.Duration = time.Since(now)
		m.Error = describeSendError(ctx, err, p.lc.DeliveryBudget)
		if errors.Is(err, ErrForbiddenAddress) {
			return m, classed{class: engine.Permanent}, false
		}
		return m, classed{class: engine.Transient}, false
	}
	defer resp.Body.Close()
	m.Excerpt, _ = readExcerpt(resp.Body) // a body cut short changes nothing about the status
	m.Duration = time.Since(now)
	m.StatusCode = resp.StatusCode

	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		c.class = engine.Delivered
	case code == http.StatusGone:
		m.Error = "410 Gone: the receiver asked not to be sent again; endpoint disabled"
		return m, classed{class: engine.Permanent}, true
	case code >= 300 && code < 400:
		m.Error = fmt.Sprintf("HTTP %d redirect not followed (Location: %q); update the endpoint url instead", code, resp.Header.Get("Location"))
		c.class = engine.Transient
	default:
		m.Error = fmt.Sprintf("HTTP %d", code)
		wait, ok := retryAfter(code, resp.Header, time.Now())
		c = classed{class: engine.Transient}
		if ok {
			m.Error += fmt.Sprintf(" (Retry-After honoured: %s)", wait)
			c = classed{class: engine.NamedWait, wait: wait}
		}
	}
	return m, c, false
}

// decide sets m's outcome by the decision both transports share
// (engine.Decide): pending with the schedule's next wait — or the
// receiver's Retry-After when it gave one — or failed when the schedule is
// spent. Retry-After never buys attempts past the schedule's bound.
func (p *Dispatcher) decide(m *Result, c classed) {
	dec := engine.Decide(engine.Attempt{Class: c.class, Wait: c.wait, Counted: m.Attempt, Backoff: p.schedule})
	m.Outcome, m.RetryIn = outcomes[dec.Verdict], dec.Wait
	if dec.Exhausted {
		m.Error += fmt.Sprintf(" (gave up after %d attempts)", m.Attempt)
	}
}

// outcomes and verdicts are the engine's verdicts (engine.Verdict) in
// webhook's words, and back. webhook skips nothing.
var (
	outcomes = map[engine.Verdict]Outcome{engine.Sent: OutcomeSent, engine.Retry: OutcomeRetry, engine.Failed: OutcomeFailed}
	verdicts = map[Outcome]engine.Verdict{OutcomeSent: engine.Sent, OutcomeRetry: engine.Retry, OutcomeFailed: engine.Failed}
)

// describeSendError says what went wrong without the URL, which may carry a
// token in its query string and would otherwise reach logs.
func describeSendError(ctx context.Context, err error, budget time.Duration) string {
	// The budget is enforced three ways (context, client timeout, response
	// header timeout) and whichever fires first names the error; they all
	// mean the same thing to an operator.
	var timeout interface{ Timeout() bool }
	if ctx.Err() == context.DeadlineExceeded || (errors.As(err, &timeout) && timeout.Timeout()) {
		return fmt.Sprintf("no answer within the %s delivery budget", budget)
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return err.Error()
}

// disableGoneSQL disables an endpoint that answered 410 Gone, returning
// the row disable reads.
const disableGoneSQL = `UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, updated_at = now()
WHERE id = $1 AND enabled
RETURNING url, coalesce(tenant_id, ''), failing_since, consecutive_failures, now()`

// disableGone disables an endpoint that answered 410 Gone, with the
// notices of a disable (disable). The reason is stored on the row and
// logged, so `worker endpoints list` shows why.
func (p *Dispatcher) disableGone(ctx context.Context, d delivery, log *slog.Logger) {
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	reason := fmt.Sprintf("receiver answered 410 Gone at %s (delivery %s)", time.Now().UTC().Format(time.RFC3339), d.id)
	if _, ok := p.disable(ctx, d, log, DisabledGone, reason, disableGoneSQL); ok {
		log.Warn("endpoint disabled: receiver answered 410 Gone", "reason", reason)
	}
}
