package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the series every outbox shares, defined in one place and
// labelled by outbox (the table: email_outbox, webhook_outbox,
// webhook_deliveries), so one dashboard panel or alert covers them all:
//
//	postbox_claimed_total{outbox}      rows claimed (each claim is one attempt)
//	postbox_released_total{outbox}     claimed rows released unstarted (due again at once)
//	postbox_stale_marks_total{outbox}  CAS marks dropped: the row was no longer pending
//	postbox_mark_errors_total{outbox}  marks that could not run (the row waits out its lease)
//	postbox_panics_total{outbox}       panics recovered in delivery goroutines (their rows recorded)
//	postbox_swept_total{outbox}        rows the sweep moved into the claim window (committed late, or due in the past)
//
// A nil *Metrics records nothing.
type Metrics struct {
	claimed, released, stale, markErrors, panics, swept *prometheus.CounterVec
}

// The tables, for the outbox label.
var outboxes = []string{"email_outbox", "webhook_outbox", "webhook_deliveries"}

var registered sync.Map // prometheus.Registerer → *Metrics

// MetricsFor returns reg's shared series, registering them the first time:
// the email and webhook sides each ask, and both get the same counters.
func MetricsFor(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		return nil
	}
	if m, ok := registered.Load(reg); ok {
		return m.(*Metrics)
	}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"outbox"})
	}
	m := &Metrics{
		claimed:    vec("postbox_claimed_total", "Rows claimed, by outbox table (each claim is one attempt)."),
		released:   vec("postbox_released_total", "Claimed rows released unstarted (due again at once), by outbox table."),
		stale:      vec("postbox_stale_marks_total", "CAS marks dropped because the row was no longer pending, by outbox table."),
		markErrors: vec("postbox_mark_errors_total", "Marks that could not run (the row is retried when its lease expires), by outbox table."),
		panics:     vec("postbox_panics_total", "Panics recovered in delivery goroutines (their rows recorded), by outbox table."),
		swept:      vec("postbox_swept_total", "Rows the sweep moved into the claim window (their transaction committed long after it began, or their due time was in the past), by outbox table."),
	}
	if actual, loaded := registered.LoadOrStore(reg, m); loaded {
		return actual.(*Metrics)
	}
	for _, c := range []*prometheus.CounterVec{m.claimed, m.released, m.stale, m.markErrors, m.panics, m.swept} {
		reg.MustRegister(c)
		for _, o := range outboxes {
			c.WithLabelValues(o) // every series exists from the start, at zero
		}
	}
	return m
}

func (m *Metrics) add(c func(*Metrics) *prometheus.CounterVec, outbox string, n int) {
	if m == nil || n <= 0 {
		return
	}
	c(m).WithLabelValues(outbox).Add(float64(n))
}

// Claimed counts n rows claimed from outbox.
func (m *Metrics) Claimed(outbox string, n int) {
	m.add(func(m *Metrics) *prometheus.CounterVec { return m.claimed }, outbox, n)
}

// Released counts n claimed rows released unstarted.
func (m *Metrics) Released(outbox string, n int) {
	m.add(func(m *Metrics) *prometheus.CounterVec { return m.released }, outbox, n)
}

// Swept counts n rows the sweep moved into the claim window.
func (m *Metrics) Swept(outbox string, n int) {
	m.add(func(m *Metrics) *prometheus.CounterVec { return m.swept }, outbox, n)
}

// Stale counts a dropped CAS mark.
func (m *Metrics) Stale(outbox string) {
	m.add(func(m *Metrics) *prometheus.CounterVec { return m.stale }, outbox, 1)
}

// MarkError counts a mark that could not run.
func (m *Metrics) MarkError(outbox string) {
	m.add(func(m *Metrics) *prometheus.CounterVec { return m.markErrors }, outbox, 1)
}

// Panics counts n recovered panics.
func (m *Metrics) Panics(outbox string, n int) {
	m.add(func(m *Metrics) *prometheus.CounterVec { return m.panics }, outbox, n)
}
