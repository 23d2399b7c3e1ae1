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

	// In flight: a series per endpoint while it has attempts in flight,
	// none once they end, so thousands of endpoints leave no series behind.
	endA1, endA2, endB := a.attemptInFlight("ep-a"), b.attemptInFlight("ep-a"), a.attemptInFlight("ep-b")
	if got := gaugeSeries(t, reg, "postbox_webhook_in_flight"); got["ep-a"] != 2 || got["ep-b"] != 1 || len(got) != 2 {
		t.Fatalf("in flight = %v, want ep-a 2, ep-b 1", got)
	}
	endA1()
	endB()
	if got := gaugeSeries(t, reg, "postbox_webhook_in_flight"); got["ep-a"] != 1 || len(got) != 1 {
		t.Fatalf("in flight after two ended = %v, want ep-a 1 and no series for ep-b", got)
	}
	endA2()
	if got := gaugeSeries(t, reg, "postbox_webhook_in_flight"); len(got) != 0 {
		t.Fatalf("in flight after all ended = %v, want no series", got)
	}
}

// gaugeSeries reads every series of a gauge with one label from reg, by
// label value.
func gaugeSeries(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}
