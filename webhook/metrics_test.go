package webhook

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	var nilMetrics *Metrics // counts nothing, panics never
	nilMetrics.eventDispatched()
	nilMetrics.delivery("succeeded")
	nilMetrics.engine().Stale("webhook_deliveries")
	nilMetrics.endpointDisabled("gone")
	nilMetrics.throttled("e", 1)
	nilMetrics.attemptInFlight("e")()
	nilMetrics.breakerOpened()
	nilMetrics.deferred(2)
	nilMetrics.engine().MarkError("webhook_outbox")
	nilMetrics.pruned(3)
	nilMetrics.attemptDuration(0.1)

	reg := prometheus.NewRegistry()
	a, b := NewMetrics(reg), NewMetrics(reg) // a second Dispatcher in one process shares the collectors
	a.delivery("failed")
	b.delivery("failed")
	if got := counterValue(t, reg, "postbox_webhook_deliveries_total", "failed"); got != 2 {
		t.Fatalf("deliveries{outcome=failed} = %v, want 2", got)
	}
	NewMetrics(nil).eventDispatched() // unregistered works too

	// The series every outbox shares are registered once per registry,
	// whichever side asks first, and labelled by outbox.
	a.engine().Claimed("webhook_outbox", 2)
	b.engine().Claimed("webhook_deliveries", 3)
	if got := counterValue(t, reg, "postbox_claimed_total", "webhook_deliveries"); got != 3 {
		t.Fatalf("postbox_claimed_total{outbox=webhook_deliveries} = %v, want 3", got)
	}
}
