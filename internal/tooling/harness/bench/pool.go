package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/outbox"
)

// The pool sections measure what users run: real `worker run` processes
// (built from this module) against a fresh database, each sending to its
// own SMTP sink port, beside the River peer run as processes too.
const (
	SectionPoolBacklog    = "pool-backlog"
	SectionPoolLatency    = "pool-latency"
	SectionPoolEnqueue    = "pool-enqueue"
	SectionPoolLeaderKill = "pool-leaderkill"
	SectionPoolScale      = "pool-scale"
	SectionPoolRetention  = "pool-retention"
	SectionPoolPgBouncer  = "pool-pgbouncer"
	SectionPoolRateLimit  = "pool-ratelimit"
	SectionPoolLowRate    = "pool-lowrate"
	SectionPoolFair       = "pool-fair"

	SectionPoolWebhook          = "pool-webhook"
	SectionPoolWebhookRateLimit = "pool-webhook-ratelimit"
	SectionPoolWebhookRetry     = "pool-webhook-retry"
	SectionPoolWebhookBreaker   = "pool-webhook-breaker"
	SectionPoolWebhookOrdered   = "pool-webhook-ordered"
	SectionPoolWebhookScale     = "pool-webhook-scale"
	SectionPoolWebhookTenants   = "pool-webhook-tenants"
	SectionPoolWebhookIsolation = "pool-webhook-isolation"
	SectionPoolWebhookSchemas   = "pool-webhook-schemas"
	SectionPoolWebhookFair      = "pool-webhook-fair"
	SectionPoolAPI              = "pool-api"
)

// PoolSections lists the pool sections in run order.
var PoolSections = []string{SectionPoolBacklog, SectionPoolLatency, SectionPoolEnqueue, SectionPoolLeaderKill, SectionPoolScale, SectionPoolRetention,
	SectionPoolPgBouncer, SectionPoolRateLimit, SectionPoolLowRate, SectionPoolFair,
	SectionPoolWebhook, SectionPoolWebhookRateLimit, SectionPoolWebhookRetry, SectionPoolWebhookBreaker, SectionPoolWebhookOrdered,
	SectionPoolWebhookScale, SectionPoolWebhookTenants, SectionPoolWebhookIsolation, SectionPoolWebhookSchemas, SectionPoolWebhookFair, SectionPoolAPI}

// DefaultPoolSections are what --pool runs without --only: all but the
// scale and retention sections, which seed millions of rows and run for
// many minutes, and the PgBouncer section, which needs pgbouncer.
var DefaultPoolSections = PoolSections[:4]

// Report section titles of the pool sections.
const (
	titlePoolBacklog   = "pool backlog"
	titlePoolLatency   = "pool latency commit→DATA"
	titlePoolEnqueue   = "pool enqueue"
	titlePoolKill      = "pool leader kill"
	titlePoolScale     = "pool scale: kept history, held snapshot"
	titlePoolRetention = "pool retention: weeks dropped under load"
	titlePoolPgBouncer = "pool through PgBouncer, transaction mode"
	titlePoolRateLimit = "pool email rate limit (EMAIL_RATE_LIMIT)"
	titlePoolLowRate   = "pool low rate: machine CPU per message, 1 replica, relay 0"
	titlePoolFair      = "pool fairness: one customer's flood against another's mail"

	titlePoolWebhook          = "pool webhooks"
	titlePoolWebhookRateLimit = "pool webhook rate limit (webhook_endpoints.rate_limit)"
	titlePoolWebhookRetry     = "pool webhook retry latency, due → received"
	titlePoolWebhookBreaker   = "pool webhook breaker"
	titlePoolWebhookOrdered   = "pool webhook ordered delivery (webhook_outbox.ordering_key)"
	titlePoolWebhookScale     = "pool webhook scale: kept history, held snapshot"
	titlePoolWebhookTenants   = "pool webhook tenants: 10,000 tenants against one"
	titlePoolWebhookIsolation = "pool webhook tenant isolation: 1,000 tenants, kill -9, recovery and replays"
	titlePoolWebhookSchemas   = "pool webhook schemas: enqueue with a catalog of schemas"
	titlePoolWebhookFair      = "pool webhook fairness: one tenant's slow endpoint against the others' webhooks"
	titlePoolAPI              = "pool API: enqueue over HTTP against the Go API"
)

// PoolOptions configure the pool sections. Zero fields take
// DefaultPool's values.
type PoolOptions struct {
	// Replicas are the process counts to run, each in turn (e.g. 1 and 3).
	Replicas []int
	// Concurrency is EMAIL_CONCURRENCY of every `worker run` process; the
	// River peer gets MaxWorkers = Concurrency per process, so both sides
	// have Concurrency × R workers (and SMTP connections) in all.
	Concurrency int
	// PeerWorkers, when set, overrides the River peer's MaxWorkers per
	// process: River tuned the way its own benchmark runs it (1000) rather
	// than at the same number of connections.
	PeerWorkers int
	// RelayDelay is the sink's time per message, before it answers DATA.
	// The relay's limit is then Concurrency × R ÷ RelayDelay.
	RelayDelay time.Duration
	// N is the backlog: rows (or peer jobs) inserted before the processes
	// start.
	N int
	// Rates are the steady offered loads of the latency section, msg/s.
	Rates []int
	// Duration is the length of each latency run.
	Duration time.Duration
	// The low-rate section: each of LowRates msg/s for LowRateDuration,
	// then each product idle for IdleFor.
	LowRates        []int
	LowRateDuration time.Duration
	IdleFor         time.Duration
	// Trials is how often each section runs; the table shows the median.
	Trials int
	// Sections to run; nil means PoolSections.
	Sections []string

	// EnqueueGoroutines and EnqueueDuration shape the enqueue section.
	EnqueueGoroutines int
	EnqueueDuration   time.Duration
	// KillRate is the leader-kill section's steady load, KillAfter when
	// the leader dies, KillLoad how long the load goes on after.
	KillRate  int
	KillAfter time.Duration
	KillLoad  time.Duration

	// The scale section: ScaleRows sent rows (and their attempts) seeded,
	// ScaleRate msg/s offered for ScaleDuration, a backlog of ScaleBacklog
	// drained. KeepSeed keeps the seeded database for the next run, which
	// reuses it while the migrations are unchanged.
	ScaleRows     int
	ScaleRate     int
	ScaleDuration time.Duration
	ScaleBacklog  int
	KeepSeed      bool
	// RetentionRows is the rows seeded into each history log by the
	// retention section, over RetentionDays; it reuses ScaleRate and
	// ScaleDuration for its steady load.
	RetentionRows int

	// The fairness section (pool-fair): customer A enqueues FairRows
	// invoices at once, then customer B a password reset and an invoice
	// every second for FairLoad; B's rows are waited for up to FairWait
	// after B's load. FairBaseline, when set, is a previous release's
	// worker binary (first come, first served), run as a path of its own
	// against this build's schema. FairHold runs each case again with a
	// REPEATABLE READ snapshot held: postbox's path only, every path with
	// FairHoldAll (the FIFO paths take A's whole drain, minutes, each).
	FairRows     int
	FairLoad     time.Duration
	FairWait     time.Duration
	FairBaseline string
	FairHold     bool
	FairHoldAll  bool

	// The webhook sections (pool-webhook*): WebhookEvents events per
	// backlog, to each of WebhookFanouts endpoint counts in turn, with
	// WebhookReplicas processes (the other webhook sections run the
	// largest), WEBHOOK_CONCURRENCY=WebhookConcurrency, and receivers
	// answering after ReceiverDelay. WebhookLoad is how long the
	// rate-limit, retry and breaker sections offer their load;
	// WebhookSettle how long the breaker section then waits before it
	// counts what was delivered. BreakerOff is the environment that turns
	// the breaker off.
	WebhookEvents      int
	WebhookFanouts     []int
	WebhookReplicas    []int
	WebhookConcurrency int
	ReceiverDelay      time.Duration
	WebhookLoad        time.Duration
	WebhookSettle      time.Duration
	BreakerOff         []string
	// WebhookScaleEvents is the delivered events (each with its delivery
	// and attempt) the pool-webhook-scale section seeds; it reuses
	// ScaleRate, ScaleDuration and ScaleBacklog for its load.
	WebhookScaleEvents int
	// IsolationEvents is the events the pool-webhook-isolation section
	// enqueues at random tenants of its 1,000.
	IsolationEvents int
	// The webhook fairness section (pool-webhook-fair): tenant A enqueues
	// WebhookFairEvents events to its slow endpoint at once, then ten
	// other tenants 5 events a second each for WebhookFairLoad; A alone
	// for a third of WebhookFairLoad (at least 6 s); A's backlog of
	// WebhookFairBacklog events, then B's single events. What has not
	// arrived WebhookFairWait after a load is counted a lower bound.
	// WebhookFairBaseline, when set, is a previous build's worker binary,
	// run as a path of its own against this build's schema.
	// WebhookFairHold runs the slow tenant's case and the backlog's again
	// with a REPEATABLE READ snapshot held, as FairHold: postbox's path
	// only, every path with WebhookFairHoldAll.
	WebhookFairEvents   int
	WebhookFairLoad     time.Duration
	WebhookFairBacklog  int
	WebhookFairWait     time.Duration
	WebhookFairBaseline string
	WebhookFairHold     bool
	WebhookFairHoldAll  bool

	BodyBytes int
	// Tracing adds a path to the backlog section: postbox with tracing on
	// (every span sampled, exported over OTLP/HTTP to a receiver in the
	// bench process), beside postbox with it off, to price it.
	Tracing bool
	// KeepLogs keeps the processes' logs (always kept when a run fails).
	KeepLogs bool
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// DefaultPool is the full pool run.
func DefaultPool() PoolOptions {
	return PoolOptions{
		Replicas:          []int{1},
		Concurrency:       outbox.DefaultConcurrency,
		RelayDelay:        50 * time.Millisecond,
		N:                 5000,
		Rates:             []int{200, 1000},
		Duration:          10 * time.Second,
		LowRates:          []int{1, 20, 200},
		LowRateDuration:   60 * time.Second,
		IdleFor:           60 * time.Second,
		Trials:            1,
		EnqueueGoroutines: 30,
		EnqueueDuration:   5 * time.Second,
		KillRate:          200,
		KillAfter:         5 * time.Second,
		KillLoad:          20 * time.Second,
		ScaleRows:         10_000_000,
		ScaleRate:         200,
		ScaleDuration:     120 * time.Second,
		ScaleBacklog:      20_000,
		RetentionRows:     1_000_000,
		FairRows:          20_000,
		FairLoad:          60 * time.Second,
		FairWait:          12 * time.Minute,
		FairHold:          true,
		BodyBytes:         2048,

		WebhookEvents:      3000,
		WebhookFanouts:     []int{1, 10},
		WebhookReplicas:    []int{1, 3},
		WebhookConcurrency: 16,
		ReceiverDelay:      50 * time.Millisecond,
		WebhookLoad:        60 * time.Second,
		WebhookSettle:      breakerSettle,
		BreakerOff:         BreakerOffEnv,
		WebhookScaleEvents: 2_000_000,
		IsolationEvents:    20_000,
		WebhookFairEvents:  20_000,
		WebhookFairLoad:    60 * time.Second,
		WebhookFairBacklog: 100_000,
		WebhookFairWait:    60 * time.Second,
	}
}

// QuickPool is the short preset.
func QuickPool() PoolOptions {
	o := DefaultPool()
	o.N = 1000
	o.Rates = []int{200}
	o.Duration = 3 * time.Second
	o.LowRates = []int{20}
	o.LowRateDuration = 10 * time.Second
	o.IdleFor = 10 * time.Second
	o.EnqueueDuration = 3 * time.Second
	o.KillLoad = 15 * time.Second
	o.ScaleRows = 200_000
	o.ScaleDuration = 20 * time.Second
	o.ScaleBacklog = 5000
	o.RetentionRows = 100_000
	o.FairRows = 5000
	o.FairLoad = 20 * time.Second
	o.FairWait = 3 * time.Minute
	o.FairHold = false
	o.WebhookEvents = 600
	o.WebhookLoad = 15 * time.Second
	o.WebhookSettle = 20 * time.Second
	o.WebhookScaleEvents = 100_000
	o.IsolationEvents = 2000
	o.WebhookFairEvents = 2000
	o.WebhookFairLoad = 15 * time.Second
	o.WebhookFairBacklog = 10_000
	o.WebhookFairWait = 15 * time.Second
	return o
}

func (o PoolOptions) withDefaults() PoolOptions {
	d := DefaultPool()
	if len(o.Replicas) == 0 {
		o.Replicas = d.Replicas
	}
	if o.Concurrency <= 0 {
		o.Concurrency = d.Concurrency
	}
	if o.RelayDelay < 0 {
		o.RelayDelay = d.RelayDelay
	}
	if o.N <= 0 {
		o.N = d.N
	}
	if len(o.Rates) == 0 {
		o.Rates = d.Rates
	}
	if o.Duration <= 0 {
		o.Duration = d.Duration
	}
	if len(o.LowRates) == 0 {
		o.LowRates = d.LowRates
	}
	if o.LowRateDuration <= 0 {
		o.LowRateDuration = d.LowRateDuration
	}
	if o.IdleFor <= 0 {
		o.IdleFor = d.IdleFor
	}
	if o.Trials <= 0 {
		o.Trials = d.Trials
	}
	if len(o.Sections) == 0 {
		o.Sections = DefaultPoolSections
	}
	if o.EnqueueGoroutines <= 0 {
		o.EnqueueGoroutines = d.EnqueueGoroutines
	}
	if o.EnqueueDuration <= 0 {
		o.EnqueueDuration = d.EnqueueDuration
	}
	if o.KillRate <= 0 {
		o.KillRate = d.KillRate
	}
	if o.KillAfter <= 0 {
		o.KillAfter = d.KillAfter
	}
	if o.KillLoad <= 0 {
		o.KillLoad = d.KillLoad
	}
	if o.ScaleRows <= 0 {
		o.ScaleRows = d.ScaleRows
	}
	if o.RetentionRows <= 0 {
		o.RetentionRows = d.RetentionRows
	}
	if o.ScaleRate <= 0 {
		o.ScaleRate = d.ScaleRate
	}
	if o.ScaleDuration <= 0 {
		o.ScaleDuration = d.ScaleDuration
	}
	if o.ScaleBacklog <= 0 {
		o.ScaleBacklog = d.ScaleBacklog
	}
	if o.FairRows <= 0 {
		o.FairRows = d.FairRows
	}
	if o.FairLoad <= 0 {
		o.FairLoad = d.FairLoad
	}
	if o.FairWait <= 0 {
		o.FairWait = d.FairWait
	}
	if o.BodyBytes <= 0 {
		o.BodyBytes = d.BodyBytes
	}
	if o.WebhookEvents <= 0 {
		o.WebhookEvents = d.WebhookEvents
	}
	if len(o.WebhookFanouts) == 0 {
		o.WebhookFanouts = d.WebhookFanouts
	}
	if len(o.WebhookReplicas) == 0 {
		o.WebhookReplicas = d.WebhookReplicas
	}
	if o.WebhookConcurrency <= 0 {
		o.WebhookConcurrency = d.WebhookConcurrency
	}
	if o.ReceiverDelay < 0 {
		o.ReceiverDelay = d.ReceiverDelay
	}
	if o.WebhookLoad <= 0 {
		o.WebhookLoad = d.WebhookLoad
	}
	if o.WebhookSettle <= 0 {
		o.WebhookSettle = d.WebhookSettle
	}
	if len(o.BreakerOff) == 0 {
		o.BreakerOff = d.BreakerOff
	}
	if o.WebhookScaleEvents <= 0 {
		o.WebhookScaleEvents = d.WebhookScaleEvents
	}
	if o.IsolationEvents <= 0 {
		o.IsolationEvents = d.IsolationEvents
	}
	if o.WebhookFairEvents <= 0 {
		o.WebhookFairEvents = d.WebhookFairEvents
	}
	if o.WebhookFairLoad <= 0 {
		o.WebhookFairLoad = d.WebhookFairLoad
	}
	if o.WebhookFairBacklog <= 0 {
		o.WebhookFairBacklog = d.WebhookFairBacklog
	}
	if o.WebhookFairWait <= 0 {
		o.WebhookFairWait = d.WebhookFairWait
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// Validate checks sections and figures.
func (o PoolOptions) Validate() error {
	for _, s := range o.Sections {
		if !slices.Contains(PoolSections, s) {
			return fmt.Errorf("unknown pool section %q (want %s)", s, strings.Join(PoolSections, ", "))
		}
	}
	for _, r := range slices.Concat(o.Replicas, o.WebhookReplicas) {
		if r < 1 || r > 16 {
			return fmt.Errorf("replicas %d: want 1 to 16", r)
		}
	}
	for _, f := range o.WebhookFanouts {
		if f < 1 || f > 100 {
			return fmt.Errorf("webhook endpoints per event %d: want 1 to 100", f)
		}
	}
	for _, kv := range o.BreakerOff {
		if k, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(k, "WEBHOOK_") {
			return fmt.Errorf("breaker-off setting %q: want WEBHOOK_NAME=value", kv)
		}
	}
	for _, r := range append(slices.Clone(o.Rates), o.LowRates...) {
		if r <= 0 {
			return fmt.Errorf("rate %d: must be positive", r)
		}
	}
	if o.FairLoad > 0 && o.FairLoad < time.Second {
		return fmt.Errorf("fairness load %s: want at least 1s (B enqueues once a second)", o.FairLoad)
	}
	if o.WebhookFairLoad > 0 && o.WebhookFairLoad < time.Second {
		return fmt.Errorf("webhook fairness load %s: want at least 1s (each tenant enqueues 5 events a second)", o.WebhookFairLoad)
	}
	for _, b := range []struct{ what, bin string }{{"fairness baseline", o.FairBaseline}, {"webhook fairness baseline", o.WebhookFairBaseline}} {
		if b.bin == "" {
			continue
		}
		if fi, err := os.Stat(b.bin); err != nil {
			return fmt.Errorf("%s: %w", b.what, err)
		} else if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s %s: not an executable file", b.what, b.bin)
		}
	}
	return nil
}

func (o PoolOptions) want(section string) bool { return slices.Contains(o.Sections, section) }

func (o PoolOptions) wantWebhooks() bool {
	return slices.ContainsFunc(o.Sections, func(s string) bool { return strings.HasPrefix(s, SectionPoolWebhook) })
}

// relayLimit is what the sinks can take: every connection busy, each
// message RelayDelay.
func (o PoolOptions) relayLimit(replicas int) float64 {
	return float64(o.Concurrency*replicas) / o.RelayDelay.Seconds()
}

// peerWorkers is the River peer's MaxWorkers per process.
func (o PoolOptions) peerWorkers() int {
	if o.PeerWorkers > 0 {
		return o.PeerWorkers
	}
	return o.Concurrency
}

// relayNote says how close rates came to the relay's limit, or that a
// relay answering at once sets none.
func (o PoolOptions) relayNote(replicas int, fromStart, span float64) string {
	if o.RelayDelay <= 0 {
		return "no relay delay: the relay is not the bound (CPU and Postgres are)"
	}
	limit := o.relayLimit(replicas)
	return fmt.Sprintf("%.0f%% of the relay's limit %.0f msg/s (%d conns ÷ %s) from start, %.0f%% first→last",
		100*fromStart/limit, limit, o.Concurrency*replicas, o.RelayDelay, 100*span/limit)
}

func (o PoolOptions) String() string {
	rates := make([]string, len(o.Rates))
	for i, r := range o.Rates {
		rates[i] = strconv.Itoa(r)
	}
	reps := make([]string, len(o.Replicas))
	for i, r := range o.Replicas {
		reps[i] = strconv.Itoa(r)
	}
	s := fmt.Sprintf("replicas %s, EMAIL_CONCURRENCY=%d (River peer MaxWorkers %d per process), relay delay %s per message, backlog N=%d, latency %s msg/s for %s, %d trial(s), body=%d B",
		strings.Join(reps, ","), o.Concurrency, o.peerWorkers(), o.RelayDelay, o.N, strings.Join(rates, ","), o.Duration, o.Trials, o.BodyBytes)
	if o.wantWebhooks() {
		fans := make([]string, len(o.WebhookFanouts))
		for i, f := range o.WebhookFanouts {
			fans[i] = strconv.Itoa(f)
		}
		wr := make([]string, len(o.WebhookReplicas))
		for i, r := range o.WebhookReplicas {
			wr[i] = strconv.Itoa(r)
		}
		s += fmt.Sprintf("; webhooks: replicas %s, WEBHOOK_CONCURRENCY=%d, %d events × %s endpoint(s), receiver delay %s, load %s, settle %s, breaker off by %s",
			strings.Join(wr, ","), o.WebhookConcurrency, o.WebhookEvents, strings.Join(fans, ","), o.ReceiverDelay, o.WebhookLoad, o.WebhookSettle, strings.Join(o.BreakerOff, " "))
	}
	if o.want(SectionPoolScale) {
		s += fmt.Sprintf("; scale: %s sent rows seeded, %d msg/s for %s, backlog %d", fmtCount(o.ScaleRows), o.ScaleRate, o.ScaleDuration, o.ScaleBacklog)
	}
	if o.want(SectionPoolWebhookScale) {
		s += fmt.Sprintf("; webhook scale: %s delivered events seeded, %d events/s for %s, backlog %d", fmtCount(o.WebhookScaleEvents), o.ScaleRate, o.ScaleDuration, o.ScaleBacklog)
	}
	if o.want(SectionPoolFair) {
		base := "no FIFO baseline binary"
		if o.FairBaseline != "" {
			base = "FIFO baseline " + o.FairBaseline
		}
		s += fmt.Sprintf("; fairness: A's %s invoices, then B's reset and invoice every second for %s, B awaited up to %s, %s, %s",
			fmtCount(o.FairRows), o.FairLoad, o.FairWait, base, heldSummary(o.FairHold, o.FairHoldAll))
	}
	if o.want(SectionPoolWebhookIsolation) {
		s += fmt.Sprintf("; webhook isolation: %s events at random tenants of 1,000", fmtCount(o.IsolationEvents))
	}
	if o.want(SectionPoolWebhookFair) {
		base := "no baseline binary"
		if o.WebhookFairBaseline != "" {
			base = "baseline " + o.WebhookFairBaseline
		}
		s += fmt.Sprintf("; webhook fairness: WEBHOOK_CONCURRENCY=%d, A's %s events to a %s endpoint, then 10 tenants × %d events/s for %s (endpoints %s); A alone for %s; A's backlog of %s, then B's %d single events; awaited up to %s; %s; the slow tenant and the backlog: %s",
			hookFairConc, fmtCount(o.WebhookFairEvents), hookFairSlow, hookFairRate, o.WebhookFairLoad, hookFairQuick, o.hookFairAloneWindow(), fmtCount(o.WebhookFairBacklog), hookFairSingles, o.WebhookFairWait, base,
			heldSummary(o.WebhookFairHold, o.WebhookFairHoldAll))
	}
	return s
}

// heldSummary says which of a fairness section's paths run again with a
// snapshot held (FairHold and FairHoldAll, or the webhook section's).
func heldSummary(hold, all bool) string {
	switch {
	case hold && all:
		return "each path again with a snapshot held"
	case hold:
		return "postbox again with a snapshot held"
	}
	return "no snapshot held"
}

// RunPool is Run for the pool sections: a fresh postbox_bench_* database,
// migrated, dropped afterwards unless keep.
func RunPool(ctx context.Context, opts PoolOptions, keep bool, envVars ...string) (*Report, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	url, name, cleanup, err := scratchDatabase(ctx, opts.Progress, keep, envVars...)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if keep {
		opts.KeepLogs = true
	}
	rep, err := RunPoolURL(ctx, url, opts)
	if rep != nil {
		rep.Database = name
		if keep {
			rep.Database += " (kept)"
		}
	}
	return rep, err
}

// poolRunner carries one pool run's state.
type poolRunner struct {
	*runner
	po   PoolOptions
	bins binaries
	tmp  string
	seq  int
	ctl  *pgxpool.Pool // the bench's own connections: setup, checks, leader lookup
	base string        // the run's own database, which url may leave for a while (onSeeded)

	seeds    map[string]string // the scale sections' seeded templates by seedKind.prefix, once made or found
	cleanups []func()          // run when the run ends
	otlp     *otlpSink         // the traced path's receiver, started with it
}

// RunPoolURL runs the pool sections on an existing, migrated database
// that nothing else uses.
func RunPoolURL(ctx context.Context, url string, opts PoolOptions) (rep *Report, err error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &runner{opts: Options{BodyBytes: opts.BodyBytes}.withDefaults(), url: url, progress: opts.Progress, body: body(opts.BodyBytes)}
	r.rep = &Report{Options: r.opts, Pool: &opts, Started: time.Now()}
	if r.rep.Machine, err = r.machine(ctx); err != nil {
		return nil, err
	}
	pr := &poolRunner{runner: r, po: opts, base: url, seeds: map[string]string{}}
	defer func() {
		for _, c := range pr.cleanups {
			c()
		}
	}()
	if pr.tmp, err = os.MkdirTemp("", "postbox-bench-pool-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil || opts.KeepLogs {
			r.logf("pool: process logs kept in %s", pr.tmp)
			return
		}
		_ = os.RemoveAll(pr.tmp)
	}()
	r.logf("pool: building ./cmd/worker and the River peer into %s", pr.tmp)
	if pr.bins, err = build(ctx, pr.tmp); err != nil {
		return nil, err
	}
	if pr.ctl, err = r.pool(ctx, 4); err != nil {
		return nil, err
	}
	defer pr.ctl.Close()

	steps := []struct {
		on  bool
		run func(context.Context) error
	}{
		{opts.want(SectionPoolBacklog), pr.backlogSection},
		{opts.want(SectionPoolLatency), pr.latencySection},
		{opts.want(SectionPoolEnqueue), pr.enqueueSection},
		{opts.want(SectionPoolLeaderKill), pr.leaderKillSection},
		{opts.want(SectionPoolScale), pr.scaleSection},
		{opts.want(SectionPoolRetention), pr.retentionSection},
		{opts.want(SectionPoolPgBouncer), pr.pgbouncerSection},
		{opts.want(SectionPoolRateLimit), pr.rateLimitSection},
		{opts.want(SectionPoolLowRate), pr.lowRateSection},
		{opts.want(SectionPoolFair), pr.fairSection},
		{opts.want(SectionPoolWebhook), pr.webhookSection},
		{opts.want(SectionPoolWebhookRateLimit), pr.webhookRateLimitSection},
		{opts.want(SectionPoolWebhookRetry), pr.webhookRetrySection},
		{opts.want(SectionPoolWebhookBreaker), pr.webhookBreakerSection},
		{opts.want(SectionPoolWebhookOrdered), pr.webhookOrderedSection},
		{opts.want(SectionPoolWebhookScale), pr.webhookScaleSection},
		{opts.want(SectionPoolWebhookTenants), pr.webhookTenantsSection},
		{opts.want(SectionPoolWebhookIsolation), pr.webhookIsolationSection},
		{opts.want(SectionPoolWebhookSchemas), pr.webhookSchemasSection},
		{opts.want(SectionPoolWebhookFair), pr.webhookFairSection},
		{opts.want(SectionPoolAPI), pr.apiSection},
	}
	for _, s := range steps {
		if !s.on {
			continue
		}
		if err := s.run(ctx); err != nil {
			return r.rep, err
		}
	}
	r.rep.Elapsed = time.Since(r.rep.Started)
	if end := loadAvg(); end != "" && r.rep.Machine.LoadAvg != "" {
		r.rep.Machine.LoadAvg += " → " + end
	}
	return r.rep, nil
}

// relaySet is one sink per replica, sharing a connection gauge: a
// replica's share is what its own port received.
type relaySet struct {
	sinks []*smtpsink.Sink
	gauge *smtpsink.Gauge
}

func (pr *poolRunner) relays(n int) (*relaySet, error) {
	rs := &relaySet{gauge: new(smtpsink.Gauge)}
	for range n {
		s, err := smtpsink.Start(smtpsink.Options{DiscardData: true, DataDelay: pr.po.RelayDelay, Gauge: rs.gauge})
		if err != nil {
			rs.close()
			return nil, err
		}
		rs.sinks = append(rs.sinks, s)
	}
	return rs, nil
}

func (rs *relaySet) close() {
	for _, s := range rs.sinks {
		s.Close()
	}
}

func (rs *relaySet) total() int {
	n := 0
	for _, s := range rs.sinks {
		n += s.Len()
	}
	return n
}

// delivery is one accepted message: which sink, and when its DATA was
// accepted.
type delivery struct {
	sink int
	at   time.Time
}

// deliveries maps each row id to its deliveries, in acceptance order per
// sink.
func (rs *relaySet) deliveries() map[string][]delivery {
	out := make(map[string][]delivery, rs.total())
	for i, s := range rs.sinks {
		for _, m := range s.Messages() {
			out[m.RowID] = append(out[m.RowID], delivery{sink: i, at: m.At})
		}
	}
	return out
}

// first is the earliest delivery of ds.
func first(ds []delivery) delivery {
	f := ds[0]
	for _, d := range ds[1:] {
		if d.at.Before(f.at) {
			f = d
		}
	}
	return f
}

// tally is what the sinks hold for a set of expected row ids.
type tally struct {
	byID     map[string][]delivery
	received int       // expected ids delivered at least once
	dups     int       // deliveries beyond the first, of expected ids
	perSink  []int     // deliveries of expected ids per sink
	firstAt  time.Time // the earliest delivery
	doneAt   time.Time // the latest first delivery: when the last id arrived
	lastAt   time.Time // the latest delivery of all
}

func (rs *relaySet) tally(ids []string) tally {
	t := tally{byID: rs.deliveries(), perSink: make([]int, len(rs.sinks))}
	for _, id := range ids {
		ds := t.byID[id]
		if len(ds) == 0 {
			continue
		}
		t.received++
		t.dups += len(ds) - 1
		for _, d := range ds {
			t.perSink[d.sink]++
			if t.firstAt.IsZero() || d.at.Before(t.firstAt) {
				t.firstAt = d.at
			}
			if d.at.After(t.lastAt) {
				t.lastAt = d.at
			}
		}
		if f := first(ds); f.at.After(t.doneAt) {
			t.doneAt = f.at
		}
	}
	return t
}

// waitAll waits until every id was delivered at least once or limit
// passes, logging progress; it returns the tally either way, and whether
// all arrived.
func (pr *poolRunner) waitAll(ctx context.Context, rs *relaySet, ids []string, limit time.Duration, label string, procs []*proc) (tally, bool, error) {
	deadline := time.Now().Add(limit)
	nextLog := time.Now().Add(5 * time.Second)
	for {
		if rs.total() >= len(ids) {
			if t := rs.tally(ids); t.received == len(ids) {
				return t, true, nil
			}
		}
		now := time.Now()
		if now.After(deadline) {
			return rs.tally(ids), false, nil
		}
		if now.After(nextLog) {
			pr.logf("%s: %d of %d delivered", label, rs.tally(ids).received, len(ids))
			nextLog = now.Add(5 * time.Second)
			for _, p := range procs {
				if !p.alive() && p.waitErr != nil && !strings.Contains(p.waitErr.Error(), "killed") {
					return tally{}, false, fmt.Errorf("%s: %s exited (%v)\n%s", label, p.name, p.waitErr, p.tail())
				}
			}
		}
		select {
		case <-ctx.Done():
			return tally{}, false, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// path is what runs against the sinks: postbox's `worker run`, or the
// River peer with one of its two fetch settings.
type path struct {
	name   string
	peer   *peerFetch
	traced bool // a worker run exporting every span (PoolOptions.Tracing)
	// env is added to a worker run's environment, and wins over it.
	env []string
	// workers, when set, is the peer's MaxWorkers per process instead of
	// PoolOptions.peerWorkers (the webhook sections: WebhookConcurrency).
	workers int
	// bin, when set, is the worker binary run instead of this build's: a
	// previous release, as a baseline (pool-fair).
	bin string
	// peerRate, when set, caps each peer process's sends a second
	// (PEER_RATE): River has no pool-wide rate limit of its own.
	peerRate int
}

// peerWorkers is the River peer's MaxWorkers per process on path p.
func (p path) peerWorkers(po PoolOptions) int {
	if p.workers > 0 {
		return p.workers
	}
	return po.peerWorkers()
}

// peerFetch is a River peer configuration.
type peerFetch struct {
	label        string
	cooldown     time.Duration // FetchCooldown; 0 keeps River's default (the inserter's too)
	pollInterval time.Duration // FetchPollInterval; 0 keeps River's default
	effCooldown  time.Duration // the figures in effect, for the notes
	effPoll      time.Duration
}

var (
	peerDefaults = &peerFetch{label: "River peer, defaults", effCooldown: 100 * time.Millisecond, effPoll: time.Second}
	peerTuned    = &peerFetch{label: "River peer, tuned", cooldown: 2 * time.Millisecond, pollInterval: 20 * time.Millisecond,
		effCooldown: 2 * time.Millisecond, effPoll: 20 * time.Millisecond}
)

var (
	pathPostbox       = path{name: "postbox worker run"}
	pathPostboxTraced = path{name: "postbox worker run, tracing on", traced: true}
	pathPeerDefaults  = path{name: peerDefaults.label, peer: peerDefaults}
	pathPeerTuned     = path{name: peerTuned.label, peer: peerTuned}
)

func (p path) notes(po PoolOptions) string {
	if p.traced {
		return fmt.Sprintf("EMAIL_CONCURRENCY=%d per process; OTEL_TRACES_SAMPLER=always_on, OTLP/HTTP to a receiver in the bench process", po.Concurrency)
	}
	if p.peer == nil {
		return fmt.Sprintf("EMAIL_CONCURRENCY=%d per process", po.Concurrency)
	}
	return fmt.Sprintf("MaxWorkers %d per process, FetchCooldown %s, FetchPollInterval %s", p.peerWorkers(po), p.peer.effCooldown, p.peer.effPoll)
}

// processName names p's processes in a CPU split.
func (p path) processName() string {
	if p.peer != nil {
		return "riverpeer"
	}
	return "worker"
}

// start starts replicas processes of path p, process i sending to sink i,
// and waits until all serve. The first exec's time is returned.
func (pr *poolRunner) start(ctx context.Context, p path, rs *relaySet, replicas int, label string) ([]*proc, time.Time, error) {
	pr.seq++
	var procs []*proc
	var started time.Time
	for i := range replicas {
		sink := rs.sinks[i]
		logPath := filepath.Join(pr.tmp, fmt.Sprintf("%03d-%s-%d.log", pr.seq, fileSafe(label), i))
		var (
			pc  *proc
			err error
		)
		if i == 0 {
			started = time.Now()
		}
		if p.peer == nil {
			addr, aerr := pgserver.FreeAddr()
			if aerr != nil {
				stopAll(procs, time.Second)
				return nil, started, aerr
			}
			env := []string{
				"DATABASE_URL=" + pr.url, "HTTP_ADDR=" + addr,
				"SMTP_HOST=127.0.0.1", "SMTP_PORT=" + strconv.Itoa(sink.Port()), "SMTP_TLS=none",
				"APP_ENV=development", "LOG_LEVEL=warn", "EMAIL_CONCURRENCY=" + strconv.Itoa(pr.po.Concurrency),
				"WEBHOOK_USER_AGENT=" + replicaAgent(i),
			}
			if p.traced {
				if pr.otlp == nil {
					if pr.otlp, err = startOTLPSink(); err != nil {
						stopAll(procs, time.Second)
						return nil, started, err
					}
					pr.cleanups = append(pr.cleanups, pr.otlp.close)
				}
				env = append(env, pr.otlp.tracingEnv()...)
			}
			env = append(env, p.env...)
			bin := pr.bins.worker
			if p.bin != "" {
				bin = p.bin
			}
			pc, err = startProc(fmt.Sprintf("worker %d", i), bin, logPath, env, "run")
			if pc != nil {
				pc.httpAddr = addr
			}
		} else {
			ready := logPath + ".ready"
			pp := PeerProcess{DatabaseURL: pr.url, SMTPHost: "127.0.0.1", SMTPPort: sink.Port(), MaxWorkers: p.peerWorkers(pr.po),
				FetchCooldown: p.peer.cooldown, FetchPollInterval: p.peer.pollInterval, ReadyFile: ready, UserAgent: replicaAgent(i), Rate: p.peerRate}
			pc, err = startProc(fmt.Sprintf("peer %d", i), pr.bins.peer, logPath, pp.env())
			if pc != nil {
				pc.readyFile = ready
			}
		}
		if err != nil {
			stopAll(procs, time.Second)
			return nil, started, err
		}
		procs = append(procs, pc)
	}
	if err := waitReady(ctx, procs, 60*time.Second); err != nil {
		stopAll(procs, time.Second)
		return nil, started, err
	}
	return procs, started, nil
}

// stop ends the processes: SIGTERM, then SIGKILL after a few seconds.
func (pr *poolRunner) stop(procs []*proc) { stopAll(procs, 5*time.Second) }

// trials runs fn for every trial and replica count, then collapses the rows
// each produced into their median per path.
func (pr *poolRunner) trials(ctx context.Context, replicas []int, fn func(ctx context.Context, trial, replicas int) error) error {
	before := len(pr.rep.Rows)
	for t := range pr.po.Trials {
		for _, rc := range replicas {
			if pr.po.Trials > 1 {
				pr.logf("pool: trial %d of %d, %d replica(s)", t+1, pr.po.Trials, rc)
			}
			if err := fn(ctx, t, rc); err != nil {
				return err
			}
		}
	}
	pr.rep.Rows = append(pr.rep.Rows[:before], medianRows(pr.rep.Rows[before:], pr.po.Trials)...)
	return nil
}

// rotate returns ps rotated by k, so no path always runs first.
func rotate[T any](ps []T, k int) []T {
	k %= len(ps)
	return append(slices.Clone(ps[k:]), ps[:k]...)
}

func fmtShares(perSink []int) (string, float64) {
	total := 0
	for _, n := range perSink {
		total += n
	}
	parts := make([]string, len(perSink))
	top := 0.0
	for i, n := range perSink {
		pct := 0.0
		if total > 0 {
			pct = 100 * float64(n) / float64(total)
		}
		top = max(top, pct)
		parts[i] = fmt.Sprintf("%d (%.0f%%)", n, pct)
	}
	return strings.Join(parts, " / "), top
}

func rp(replicas int) string { return fmt.Sprintf("R=%d ", replicas) }

// fileSafe makes a label usable as part of a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '=', r == '.':
			return r
		}
		return '_'
	}, s)
}
