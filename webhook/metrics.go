package webhook

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/engine"
)

// Metrics are the dispatcher's Prometheus counters. A nil *Metrics is
// valid and counts nothing, so tests and tools need not set one up. The
// claim, release, stale-mark, mark-error and panic counts are the series
// every outbox shares (engine.Metrics), with outbox="webhook_outbox" or
// "webhook_deliveries".
type Metrics struct {
	shared            *engine.Metrics
	eventsDispatched  prometheus.Counter
	deliveries        *prometheus.CounterVec // outcome: succeeded, failed, retried
	endpointsDisabled *prometheus.CounterVec // reason: gone, failing
	throttledTotal    *prometheus.CounterVec // endpoint_id
	inFlight          *inFlightGauge         // endpoint_id
	breakerOpens      prometheus.Counter
	attemptsDeferred  prometheus.Counter
	outboxPruned      prometheus.Counter
	attemptSeconds    prometheus.Histogram
	latencySeconds    prometheus.Histogram
}

// NewMetrics creates the counters and registers them with reg (none when
// reg is nil). A collector that reg already holds — a second Dispatcher in
// one process — is shared rather than refused.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		shared: engine.MetricsFor(reg),
		eventsDispatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_events_dispatched_total",
			Help: "Events created by the webhook_outbox fan-out.",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_webhook_deliveries_total",
			Help: "Delivery attempts by outcome: succeeded, retried (failed transiently, still pending) or failed (for good).",
		}, []string{"outcome"}),
		endpointsDisabled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_webhook_endpoints_disabled_total",
			Help: "Endpoints disabled automatically, by reason: gone (answered 410 Gone) or failing (no success for WEBHOOK_DISABLE_AFTER).",
		}, []string{"reason"}),
		throttledTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postbox_webhook_throttled_total",
			Help: "Due deliveries the retry claim held back for the endpoint's rate limit, in-flight cap or circuit breaker, without spending an attempt.",
		}, []string{"endpoint_id"}),
		inFlight: newInFlightGauge(),
		breakerOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_breaker_open_total",
			Help: "Failed attempts that found an endpoint's circuit breaker open after counting them.",
		}),
		attemptsDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postbox_webhook_attempts_deferred_total",
			Help: "Attempts not started in process because no slot freed up within the lease; the retry worker takes them.",
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
		latencySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "postbox_webhook_delivery_latency_seconds",
			Help:    "Time from the event's creation to the succeeded mark of each delivery.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
		}),
	}
	if reg == nil {
		return m
	}
	m.latencySeconds = register(reg, m.latencySeconds)
	m.eventsDispatched = register(reg, m.eventsDispatched)
	m.deliveries = register(reg, m.deliveries)
	m.endpointsDisabled = register(reg, m.endpointsDisabled)
	m.throttledTotal = register(reg, m.throttledTotal)
	m.inFlight = register(reg, m.inFlight)
	m.breakerOpens = register(reg, m.breakerOpens)
	m.attemptsDeferred = register(reg, m.attemptsDeferred)
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

func (m *Metrics) endpointDisabled(reason string) {
	if m != nil {
		m.endpointsDisabled.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) throttled(endpointID string, n int) {
	if m != nil {
		m.throttledTotal.WithLabelValues(endpointID).Add(float64(n))
	}
}

// attemptInFlight counts one attempt to endpointID in flight; call the
// returned func when it ends.
func (m *Metrics) attemptInFlight(endpointID string) func() {
	if m == nil {
		return func() {}
	}
	return m.inFlight.start(endpointID)
}

// inFlightGauge is postbox_webhook_in_flight: the HTTP attempts this
// process has in flight, per endpoint, exported only for the endpoints
// that have any. A GaugeVec would keep a series at zero for every endpoint
// the process ever sent to — twenty thousand, for ten thousand tenants
// with two each — for as long as it runs.
type inFlightGauge struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	n    map[string]int // endpoint id → attempts in flight, never zero
}

func newInFlightGauge() *inFlightGauge {
	return &inFlightGauge{
		desc: prometheus.NewDesc("postbox_webhook_in_flight",
			"HTTP attempts this process has in flight, per endpoint (only endpoints with any); sum over replicas for the pool.",
			[]string{"endpoint_id"}, nil),
		n: map[string]int{},
	}
}

func (g *inFlightGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *inFlightGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, n := range g.n {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n), id)
	}
}

// start counts one attempt to endpointID; the func it returns ends it.
func (g *inFlightGauge) start(endpointID string) func() {
	g.mu.Lock()
	g.n[endpointID]++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.n[endpointID]--; g.n[endpointID] <= 0 {
			delete(g.n, endpointID)
		}
	}
}

func (m *Metrics) breakerOpened() {
	if m != nil {
		m.breakerOpens.Inc()
	}
}

func (m *Metrics) deferred(n int) {
	if m != nil {
		m.attemptsDeferred.Add(float64(n))
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

// engine is the shared series, nil when m is.
func (m *Metrics) engine() *engine.Metrics {
	if m == nil {
		return nil
	}
	return m.shared
}

// delivered observes enqueue→delivered latency: from the event's creation
// to now.
func (m *Metrics) delivered(createdAt time.Time) {
	if m != nil {
		m.latencySeconds.Observe(time.Since(createdAt).Seconds())
	}
}
