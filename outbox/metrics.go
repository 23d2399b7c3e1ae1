package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/engine"
)

// Metrics are the dispatcher's Prometheus series. A nil *Metrics records
// nothing, so library users need not register any.
//
//	postbox_email_outcomes_total{outcome}       sent, skipped, failed_permanent, failed_exhausted, retried
//	postbox_email_send_duration_seconds{result} Sender.Send time, result ok or error
//	postbox_email_delivery_latency_seconds      enqueue (created_at) → dispatched mark
//
// and, with outbox="email_outbox", the series every outbox shares
// (engine.Metrics): postbox_claimed_total, postbox_released_total,
// postbox_stale_marks_total, postbox_mark_errors_total, postbox_panics_total.
type Metrics struct {
	shared          *engine.Metrics
	outcomes        *prometheus.CounterVec
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
	}
	// Series that exist from the start read as 0 instead of "no data".
	for _, o := range []string{metricSent, metricSkipped, metricFailedPermanent, metricFailedExhausted, metricRetried} {
		m.outcomes.WithLabelValues(o)
	}
	m.sendDuration.WithLabelValues("ok")
	m.sendDuration.WithLabelValues("error")
	if reg != nil {
		reg.MustRegister(m.outcomes, m.sendDuration, m.deliveryLatency)
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
