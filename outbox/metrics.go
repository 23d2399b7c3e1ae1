package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the dispatcher's Prometheus series. A nil *Metrics records
// nothing, so library users need not register any.
//
//	postbox_email_claimed_total                 rows claimed
//	postbox_email_released_total                claimed rows released unstarted
//	postbox_email_outcomes_total{outcome}       sent, skipped, failed_permanent, failed_exhausted, retried
//	postbox_email_stale_marks_total{outcome}    marks dropped because the row was no longer pending
//	postbox_email_mark_errors_total             marks that could not run (the row waits out its lease)
//	postbox_email_send_duration_seconds{result} Sender.Send time, result ok or error
//	postbox_email_delivery_latency_seconds      enqueue (created_at) → dispatched mark
type Metrics struct {
	claimed         prometheus.Counter
	released        prometheus.Counter
	outcomes        *prometheus.CounterVec
	staleMarks      *prometheus.CounterVec
	markErrors      prometheus.Counter
	sendDuration    *prometheus.HistogramVec
	deliveryLatency prometheus.Histogram
}

// Outcome label values of postbox_email_outcomes_total.
const (
	metricSent            = "sent"
	metricSkipped         = "skipped"
	metricFailedPermanent = "failed_permanent"
	metricFailedExhausted = "failed_exhausted"
	metricRetried         = "retried"
)

// NewMetrics creates the series and registers them with reg (if not nil).
// It panics if they are already registered there, like promauto; share one
// *Metrics between dispatchers instead.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_email_claimed_total",
			Help: "Email outbox rows claimed (each claim is one attempt).",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_email_released_total",
			Help: "Claimed email rows released unstarted because the batch could not give them a full row budget.",
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_email_outcomes_total",
			Help: "Email attempts by recorded outcome.",
		}, []string{"outcome"}),
		staleMarks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_email_stale_marks_total",
			Help: "Email marks dropped because the row was no longer pending, by the outcome they would have written.",
		}, []string{"outcome"}),
		markErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_email_mark_errors_total",
			Help: "Email marks that failed to run; the row is retried when its lease expires.",
		}),
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
	}
	// Series that exist from the start read as 0 instead of "no data".
	for _, o := range []string{metricSent, metricSkipped, metricFailedPermanent, metricFailedExhausted, metricRetried} {
		m.outcomes.WithLabelValues(o)
	}
	for _, o := range []Outcome{OutcomeSent, OutcomeSkipped, OutcomeFailed, OutcomeRetry} {
		m.staleMarks.WithLabelValues(string(o))
	}
	m.sendDuration.WithLabelValues("ok")
	m.sendDuration.WithLabelValues("error")
	if reg != nil {
		reg.MustRegister(m.claimed, m.released, m.outcomes, m.staleMarks, m.markErrors, m.sendDuration, m.deliveryLatency)
	}
	return m
}

func (m *Metrics) addClaimed(n int) {
	if m != nil && n > 0 {
		m.claimed.Add(float64(n))
	}
}

func (m *Metrics) addReleased(n int) {
	if m != nil && n > 0 {
		m.released.Add(float64(n))
	}
}

func (m *Metrics) outcome(label string) {
	if m != nil {
		m.outcomes.WithLabelValues(label).Inc()
	}
}

func (m *Metrics) staleMark(o Outcome) {
	if m != nil {
		m.staleMarks.WithLabelValues(string(o)).Inc()
	}
}

func (m *Metrics) markError() {
	if m != nil {
		m.markErrors.Inc()
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
