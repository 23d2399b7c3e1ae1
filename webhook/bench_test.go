package webhook

import (
	"context"
	"net/http"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// BenchmarkDrain fans out 1,000 events to 10 endpoints on one loopback
// receiver and makes every first attempt: 10,000 signed POSTs, 10,000
// marks. Run with: go test -run '^$' -bench Drain -benchtime 1x ./webhook/
func BenchmarkDrain(b *testing.B) {
	events, endpoints := 1000, benchEndpoints
	ctx := context.Background()
	rc := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for b.Loop() {
		b.StopTimer()
		pool := pgtest.NewPool(b)
		p, err := NewDispatcher(pool, Config{Settings: Settings{AllowedCIDRs: loopback}})
		if err != nil {
			b.Fatal(err)
		}
		srv := newBenchServer(b, rc)
		// Endpoints that have answered before, as in steady running: a new
		// endpoint's first attempts past its unproven cap are born held for
		// the retry lane, which Drain does not run.
		for range endpoints {
			provenEndpoint(b, pool, srv)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload)
SELECT 'invoice.paid', jsonb_build_object('invoice', 'in_' || i, 'amount', i) FROM generate_series(1, $1) AS i`, events); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var total Tally
		for total.Events < events {
			sum, err := p.Drain(ctx, testWindow)
			if err != nil {
				b.Fatal(err)
			}
			total.Add(sum)
		}
		b.StopTimer()
		if total.Sent != events*endpoints {
			b.Fatalf("drain: %+v, want %d deliveries succeeded", total, events*endpoints)
		}
		p.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(events*endpoints)/b.Elapsed().Seconds()*float64(b.N), "deliveries/s")
}

var benchEndpoints = 10
