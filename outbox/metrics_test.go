package outbox

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

func TestMetrics_CountOutcomes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	insertRow(t, pool, "raw", rawPayload("ok@example.com"))
	perm := insertRow(t, pool, "raw", rawPayload("perm@example.com"))
	temp := insertRow(t, pool, "raw", rawPayload("temp@example.com"))
	skip := insertRow(t, pool, "raw", rawPayload("skip@example.com"))
	sender := newFakeSender(func(_ context.Context, msg smtp.Message) error {
		switch msg.RowID {
		case perm:
			return &smtp.ReplyError{Code: 550, Text: "no"}
		case temp:
			return &smtp.ReplyError{Code: 451, EnhancedCode: "4.3.0", Text: "later"}
		}
		return nil
	})
	renderer := RendererFunc(func(ctx context.Context, row *Row) (smtp.Message, error) {
		if row.ID == skip {
			return smtp.Message{}, ErrSkip
		}
		return DefaultRenderer().Render(ctx, row)
	})
	reg := prometheus.NewRegistry()
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Metrics = NewMetrics(reg); c.Renderer = renderer })
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, label string
		want        float64
	}{
		{"postbox_claimed_total", "email_outbox", 4},
		{"postbox_released_total", "email_outbox", 0},
		{"postbox_email_outcomes_total", metricSent, 1},
		{"postbox_email_outcomes_total", metricSkipped, 1},
		{"postbox_email_outcomes_total", metricFailedPermanent, 1},
		{"postbox_email_outcomes_total", metricRetried, 1},
		{"postbox_email_outcomes_total", metricFailedExhausted, 0},
		{"postbox_mark_errors_total", "email_outbox", 0},
		{"postbox_stale_marks_total", "email_outbox", 0},
	} {
		if got := counterValue(t, reg, tc.name, tc.label); got != tc.want {
			t.Errorf("%s{%s} = %v, want %v", tc.name, tc.label, got, tc.want)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				counts[f.GetName()] += h.GetSampleCount()
			}
		}
	}
	if counts["postbox_email_send_duration_seconds"] != 3 || counts["postbox_email_delivery_latency_seconds"] != 1 {
		t.Errorf("histogram sample counts %v, want 3 sends and 1 delivery", counts)
	}
}

// A nil *Metrics records nothing and does not panic.
func TestMetrics_NilIsSafe(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.engine().Claimed(table.Name, 1)
	m.engine().Released(table.Name, 1)
	m.outcome(metricSent)
	m.engine().Stale(table.Name)
	m.engine().MarkError(table.Name)
	m.send(0, nil)
	m.delivered(0)
}
