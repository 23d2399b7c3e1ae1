package webhook

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the pipeline's Prometheus counters. A nil *Metrics is valid
// and counts nothing, so tests and tools need not set one up.
type Metrics struct {
	eventsDispatched  prometheus.Counter
	deliveries        *prometheus.CounterVec // outcome: succeeded, failed, retried
	staleMarks        *prometheus.CounterVec // table: webhook_deliveries, webhook_outbox
	endpointsDisabled prometheus.Counter
	attemptsDeferred  prometheus.Counter
	markErrors        prometheus.Counter
	outboxPruned      prometheus.Counter
	attemptSeconds    prometheus.Histogram
	claimed           *prometheus.CounterVec // table: webhook_outbox, webhook_deliveries
	released          *prometheus.CounterVec // table
	latencySeconds    prometheus.Histogram
}

// NewMetrics creates the counters and registers them with reg (none when
// reg is nil). A collector that reg already holds — a second Dispatcher in
// one process — is shared rather than refused.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		eventsDispatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_events_dispatched_total",
			Help: "Events created by the webhook_outbox fan-out.",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_webhook_deliveries_total",
			Help: "Delivery attempts by outcome: succeeded, retried (failed transiently, still pending) or failed (for good).",
		}, []string{"outcome"}),
		staleMarks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_webhook_stale_marks_total",
			Help: "CAS marks dropped because a sibling had already resolved the row.",
		}, []string{"table"}),
		endpointsDisabled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_endpoints_disabled_total",
			Help: "Endpoints disabled automatically because they answered 410 Gone.",
		}),
		attemptsDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_attempts_deferred_total",
			Help: "Attempts not started in process because no slot freed up within the lease; the retry worker takes them.",
		}),
		markErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_mark_errors_total",
			Help: "Marks that failed to write; the row's lease expires and it is attempted again.",
		}),
		outboxPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_outbox_pruned_total",
			Help: "Dispatched webhook_outbox rows deleted by the pruner.",
		}),
		attemptSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "postbox_webhook_attempt_duration_seconds",
			Help:    "HTTP attempt duration, request to response body read.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 13},
		}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_webhook_claimed_total",
			Help: "Rows claimed, each one attempt: webhook_outbox rows by the drainer, deliveries at birth and by the retry worker.",
		}, []string{"table"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_webhook_released_total",
			Help: "Claimed rows released unstarted (made due again at once), by table.",
		}, []string{"table"}),
		latencySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "postbox_webhook_delivery_latency_seconds",
			Help:    "Time from the event's creation to the succeeded mark of each delivery.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
		}),
	}
	if reg == nil {
		return m
	}
	m.claimed = register(reg, m.claimed)
	m.released = register(reg, m.released)
	m.latencySeconds = register(reg, m.latencySeconds)
	m.eventsDispatched = register(reg, m.eventsDispatched)
	m.deliveries = register(reg, m.deliveries)
	m.staleMarks = register(reg, m.staleMarks)
	m.endpointsDisabled = register(reg, m.endpointsDisabled)
	m.attemptsDeferred = register(reg, m.attemptsDeferred)
	m.markErrors = register(reg, m.markErrors)
	m.outboxPruned = register(reg, m.outboxPruned)
	m.attemptSeconds = register(reg, m.attemptSeconds)
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a name clash with a different collector is a programming error
	}
	return c
}

func (m *Metrics) eventDispatched() {
	if m != nil {
		m.eventsDispatched.Inc()
	}
}

func (m *Metrics) delivery(outcome string) {
	if m != nil {
		m.deliveries.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) staleMark(table string) {
	if m != nil {
		m.staleMarks.WithLabelValues(table).Inc()
	}
}

func (m *Metrics) endpointDisabled() {
	if m != nil {
		m.endpointsDisabled.Inc()
	}
}

func (m *Metrics) deferred(n int) {
	if m != nil {
		m.attemptsDeferred.Add(float64(n))
	}
}

func (m *Metrics) markError() {
	if m != nil {
		m.markErrors.Inc()
	}
}

func (m *Metrics) pruned(n int64) {
	if m != nil {
		m.outboxPruned.Add(float64(n))
	}
}

func (m *Metrics) attemptDuration(seconds float64) {
	if m != nil {
		m.attemptSeconds.Observe(seconds)
	}
}

func (m *Metrics) claim(table string, n int) {
	if m != nil && n > 0 {
		m.claimed.WithLabelValues(table).Add(float64(n))
	}
}

func (m *Metrics) release(table string, n int) {
	if m != nil && n > 0 {
		m.released.WithLabelValues(table).Add(float64(n))
	}
}

// delivered observes enqueue→delivered latency: from the event's creation
// to now.
func (m *Metrics) delivered(createdAt time.Time) {
	if m != nil {
		m.latencySeconds.Observe(time.Since(createdAt).Seconds())
	}
}
