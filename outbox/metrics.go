package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/engine"
)

// Metrics are the dispatcher's Prometheus series. A nil *Metrics records
// nothing, so library users need not register any.
//
//	postbox_email_outcomes_total{outcome}       sent, skipped, failed_permanent, failed_exhausted, retried, throttled
//	postbox_email_send_duration_seconds{result} Sender.Send time, result ok or error
//	postbox_email_delivery_latency_seconds      enqueue (created_at) → dispatched mark
//	postbox_email_events_total{provider,type,class} delivery events recorded (duplicates not counted); class hard, soft or ""
//	postbox_email_event_orphans_total{provider}  of those, events whose row was not found
//	postbox_email_event_mismatches_total{provider} of those, events about another recipient than their row's (they suppress nothing)
//	postbox_email_suppressions_added_total{source} addresses put on the list by events and relay replies
//
// and, with outbox="email_outbox", the series every outbox shares
// (engine.Metrics): postbox_claimed_total, postbox_released_total,
// postbox_stale_marks_total, postbox_mark_errors_total, postbox_panics_total.
type Metrics struct {
	shared          *engine.Metrics
	outcomes        *prometheus.CounterVec
	sendDuration    *prometheus.HistogramVec
	deliveryLatency prometheus.Histogram
	events          *prometheus.CounterVec
	orphans         *prometheus.CounterVec
	mismatches      *prometheus.CounterVec
	suppressed      *prometheus.CounterVec
}

// Outcome label values of postbox_email_outcomes_total.
const (
	metricSent            = "sent"
	metricSkipped         = "skipped"
	metricFailedPermanent = "failed_permanent"
	metricFailedExhausted = "failed_exhausted"
	metricRetried         = "retried"
	metricThrottled       = "throttled" // retried within seconds, not counted toward giving up
)

// NewMetrics creates the series and registers them with reg (if not nil).
// It panics if they are already registered there, like promauto; share one
// *Metrics between dispatchers instead. The shared series are registered
// once per registry, whichever side asks first.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		shared: engine.MetricsFor(reg),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_email_outcomes_total",
			Help: "Email attempts by recorded outcome.",
		}, []string{"outcome"}),
		sendDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "postbox_email_send_duration_seconds",
			Help:    "Time spent in Sender.Send per email.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40},
		}, []string{"result"}),
		deliveryLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "postbox_email_delivery_latency_seconds",
			Help:    "Time from enqueue (created_at) to the dispatched mark.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 6 * 3600, 24 * 3600, 72 * 3600},
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_email_events_total",
			Help: "Delivery events recorded, by provider, type and bounce class; a duplicate is not counted.",
		}, []string{"provider", "type", "class"}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_email_event_orphans_total",
			Help: "Delivery events recorded whose email_outbox row was not found.",
		}, []string{"provider"}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_email_event_mismatches_total",
			Help: "Delivery events recorded whose recipient is not their email_outbox row's; they suppress nothing.",
		}, []string{"provider"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_email_suppressions_added_total",
			Help: "Addresses put on the suppression list by delivery events and relay replies, by source.",
		}, []string{"source"}),
	}
	// Series that exist from the start read as 0 instead of "no data".
	for _, o := range []string{metricSent, metricSkipped, metricFailedPermanent, metricFailedExhausted, metricRetried, metricThrottled} {
		m.outcomes.WithLabelValues(o)
	}
	m.sendDuration.WithLabelValues("ok")
	m.sendDuration.WithLabelValues("error")
	for _, src := range []SuppressionSource{SourceHardBounce, SourceComplaint, SourceSMTPReply, SourceSoftBounces} {
		m.suppressed.WithLabelValues(string(src))
	}
	if reg != nil {
		reg.MustRegister(m.outcomes, m.sendDuration, m.deliveryLatency, m.events, m.orphans, m.mismatches, m.suppressed)
	}
	return m
}

// engine is the shared series, nil when m is.
func (m *Metrics) engine() *engine.Metrics {
	if m == nil {
		return nil
	}
	return m.shared
}

func (m *Metrics) outcome(label string) {
	if m != nil {
		m.outcomes.WithLabelValues(label).Inc()
	}
}

func (m *Metrics) send(d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.sendDuration.WithLabelValues(result).Observe(d.Seconds())
}

func (m *Metrics) delivered(age time.Duration) {
	if m != nil {
		m.deliveryLatency.Observe(age.Seconds())
	}
}

// CountEvent counts what RecordEvent did: a new event under its provider,
// type and class, an orphan, a suppression it added. A duplicate counts
// nothing, so the rates are of events, not of provider retries.
func (m *Metrics) CountEvent(r Recorded) {
	if m == nil || r.Duplicate {
		return
	}
	e := r.Event
	m.events.WithLabelValues(e.Provider, string(e.Type), string(e.BounceClass)).Inc()
	if e.Orphan() {
		m.orphans.WithLabelValues(e.Provider).Inc()
	}
	if r.Mismatch {
		m.mismatches.WithLabelValues(e.Provider).Inc()
	}
	if r.Suppressed != nil {
		m.suppressed.WithLabelValues(string(r.Suppressed.Source)).Inc()
	}
}
