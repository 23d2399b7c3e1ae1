package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
)

// JobsCollector reports postbox's River jobs by kind and state at
// scrape time. River has no Prometheus exporter of its own, and its client
// no count: listing the kept jobs (JobList) to count them would read a
// day's shifts at every scrape, where one grouped count over river_job is
// cheap next to a scrape interval. It is postbox's one statement over
// River's tables. Kinds, not queues: every replica has a queue of its own,
// and a label per replica that ever ran would grow without bound.
type JobsCollector struct {
	pool   *pgxpool.Pool
	kinds  []string
	logger *slog.Logger
	desc   *prometheus.Desc
}

func NewJobsCollector(pool *pgxpool.Pool, logger *slog.Logger, kinds ...string) *JobsCollector {
	return &JobsCollector{
		pool:   pool,
		kinds:  kinds,
		logger: logger,
		desc: prometheus.NewDesc("postbox_river_jobs", "postbox's River jobs by kind and state, counted at scrape time.",
			[]string{"kind", "state"}, nil),
	}
}

func (c *JobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *JobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// Every known kind and state is reported, zeros included, so an alert
	// on a series never sees it vanish when nothing is queued.
	rows, err := c.pool.Query(ctx, `
		SELECT k, s, count(j.id)
		FROM unnest($1::text[]) AS k
		CROSS JOIN unnest(enum_range(NULL::river_job_state)::text[]) AS s
		LEFT JOIN river_job j ON j.kind = k AND j.state::text = s
		GROUP BY 1, 2`, c.kinds)
	if err != nil {
		c.logger.Warn("postbox_river_jobs metric: query failed", "error", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var n int64
		if err := rows.Scan(&kind, &state, &n); err != nil {
			c.logger.Warn("postbox_river_jobs metric: scan failed", "error", err)
			return
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), kind, state)
	}
}

// CountFinished counts finished River jobs by kind and outcome from the
// client's event stream until ctx ends.
func CountFinished(ctx context.Context, client *river.Client[pgx.Tx], reg prometheus.Registerer) {
	finished := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "postbox_river_jobs_finished_total",
		Help: "River jobs this replica finished, by kind and outcome.",
	}, []string{"kind", "outcome"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "postbox_river_job_run_seconds",
		Help:    "Time River jobs spent running on this replica, by kind.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"kind"})
	reg.MustRegister(finished, duration)

	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed,
		river.EventKindJobCancelled, river.EventKindJobSnoozed)
	go func() {
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				finished.WithLabelValues(ev.Job.Kind, string(ev.Kind)).Inc()
				if ev.JobStats != nil {
					duration.WithLabelValues(ev.Job.Kind).Observe(ev.JobStats.RunDuration.Seconds())
				}
			}
		}
	}()
}
