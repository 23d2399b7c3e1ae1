package backlog

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// Collector exports the gauges to alert on, per outbox: rows pending,
// due now, failed, and the age of the oldest due row. Each is read through
// a partial index, so a scrape costs a few index scans however large the
// tables grow.
type Collector struct {
	db                        claim.DB
	pending, due, failed, age *prometheus.Desc
	blockedKeys               *prometheus.Desc
	// The email outbox by priority (outbox.ReadWaiting): due rows, the
	// customers they belong to, and the oldest's wait.
	priorityDue, priorityCustomers, priorityAge *prometheus.Desc
	logger                                      *slog.Logger
}

func NewCollector(db claim.DB, logger *slog.Logger) *Collector {
	l := []string{"outbox"}
	return &Collector{
		db:      db,
		logger:  logger,
		pending: prometheus.NewDesc("postbox_outbox_pending", "Rows waiting to be sent (due or leased or backing off).", l, nil),
		due:     prometheus.NewDesc("postbox_outbox_due", "Pending rows whose due time has passed: claimable now.", l, nil),
		failed:  prometheus.NewDesc("postbox_outbox_failed", "Rows that failed for good and wait for an operator.", l, nil),
		age: prometheus.NewDesc("postbox_outbox_oldest_due_age_seconds",
			"How long the longest-waiting due row has been due. Alert when it stays above a few tick intervals.", l, nil),
		priorityDue: prometheus.NewDesc("postbox_email_due_by_priority",
			"Due email rows of each priority (1 most urgent).", []string{"priority"}, nil),
		priorityCustomers: prometheus.NewDesc("postbox_email_customers_due_by_priority",
			"Customers with due email rows, of each priority: the claim shares each priority's sends among them in turn.", []string{"priority"}, nil),
		priorityAge: prometheus.NewDesc("postbox_email_oldest_due_age_seconds_by_priority",
			"How long the longest-waiting due email row of each priority has been due.", []string{"priority"}, nil),
		blockedKeys: prometheus.NewDesc("postbox_webhook_ordered_keys_blocked",
			"Ordering keys of an endpoint held back by a delivery that failed for good (order_on_failure block): requeue or skip it (worker ordering blocked).", nil, nil),
	}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.due
	ch <- c.failed
	ch <- c.age
	ch <- c.blockedKeys
	ch <- c.priorityDue
	ch <- c.priorityCustomers
	ch <- c.priorityAge
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	figs, err := ReadFigures(ctx, c.db)
	if err != nil {
		c.logger.Warn("outbox gauges: query failed", "error", err)
		return
	}
	for _, f := range figs {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(f.Pending), f.Outbox)
		ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(f.Due), f.Outbox)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, float64(f.Failed), f.Outbox)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, f.OldestDue.Seconds(), f.Outbox)
	}
	// No customer is read: customers are not labels (there may be
	// millions); the console names the longest waiting.
	waiting, err := outbox.ReadWaiting(ctx, c.db, 0)
	if err != nil {
		c.logger.Warn("email priority gauges: query failed", "error", err)
	}
	for _, p := range waiting.ByPriority {
		l := strconv.Itoa(int(p.Priority))
		ch <- prometheus.MustNewConstMetric(c.priorityDue, prometheus.GaugeValue, float64(p.Due), l)
		ch <- prometheus.MustNewConstMetric(c.priorityCustomers, prometheus.GaugeValue, float64(p.Customers), l)
		ch <- prometheus.MustNewConstMetric(c.priorityAge, prometheus.GaugeValue, p.OldestDue.Seconds(), l)
	}
	blocked, err := webhook.CountBlockedKeys(ctx, c.db)
	if err != nil {
		c.logger.Warn("blocked ordering keys gauge: query failed", "error", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.blockedKeys, prometheus.GaugeValue, float64(blocked))
}
