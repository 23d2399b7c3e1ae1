// Command bench measures postbox against the alternative a user would pick
// instead, one River job per message, and prints the figures that
// docs/PERFORMANCE.md reads:
//
//	go run ./internal/tooling/cmd/bench --quick        # in-process sections, the CI preset
//	go run ./internal/tooling/cmd/bench --pool         # real `worker run` processes and River peers
//
// The in-process sections (email drain throughput, enqueue cost, end-to-end
// latency at offered loads, webhook fan-out, the database's commit ceiling)
// run against a loopback SMTP sink and receivers on a fresh postbox_bench_*
// database, dropped unless --keep. With --pool it builds ./cmd/worker and
// the River peer from this module and runs the pool sections (pool-backlog,
// pool-latency, pool-enqueue, pool-leaderkill), counting from process start;
// --only selects the others (pool-scale, pool-retention, pool-pgbouncer,
// pool-ratelimit, pool-lowrate, pool-fair, and the webhook sections pool-webhook,
// pool-webhook-ratelimit, pool-webhook-retry, pool-webhook-breaker,
// pool-webhook-ordered, pool-webhook-scale, pool-webhook-tenants,
// pool-webhook-isolation, pool-webhook-fair).
//
// It is a program of its own so that the production binary does not link
// the harness. Exit codes: 0 done; 1 a run or check failed; 2 bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/postbox/postbox/internal/tooling/harness/bench"
	"github.com/postbox/postbox/internal/tooling/harness/program"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// runMain parses args and runs the bench; it returns the exit code.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return program.Main(ctx, "bench", args, stdout, stderr, benchFlags)
}

func benchFlags(fs *flag.FlagSet) program.Run {
	quick := fs.Bool("quick", false, "the CI preset: N=1500, 2 s latency runs, 100 webhook events, one trial (under a minute on a quiet 2-core machine)")
	n := fs.Int("n", 0, "email rows per path (default 10000; 1500 with --quick)")
	rates := fs.String("rates", "", "offered loads of the latency section, msg/s, comma-separated (default 200,1000)")
	duration := fs.Duration("duration", 0, "length of each latency run (default 10s; 2s with --quick)")
	events := fs.Int("events", 0, "webhook events (default 1000; 100 with --quick)")
	endpoints := fs.Int("endpoints", 0, "webhook endpoints, one loopback receiver each (default 10)")
	limitedRate := fs.Float64("limited-rate", 0, "webhook: one more endpoint rate-limited to this many requests/s beside the others (default 0: none)")
	only := fs.String("only", "", "comma-separated sections to run: "+strings.Join(bench.AllSections, ",")+"; the pool sections "+strings.Join(bench.PoolSections, ",")+" (these imply --pool)")
	var poolSize int
	var poolMode bool
	fs.Var(&poolFlag{mode: &poolMode, size: &poolSize}, "pool",
		"run the pool sections: real 'worker run' processes and River peer processes (built from this module) against one SMTP sink port per replica; "+
			"--pool=N (with a number) is the older spelling of --pool-size")
	fs.IntVar(&poolSize, "pool-size", 0, "pgx MaxConns per path of the in-process sections (default 32)")
	replicas := fs.String("replicas", "", "pool: worker processes per run, comma-separated, each in turn (default 1; e.g. 1,3)")
	relayDelay := fs.Duration("relay-delay", -1, "pool: the sink's time per message before it answers DATA; 0 answers at once (default 50ms)")
	rate := fs.String("rate", "", "pool: same as --rates")
	concurrency := fs.Int("concurrency", 0, "postbox batches in flight in the email drain, as EMAIL_CONCURRENCY (default 200; with --pool, EMAIL_CONCURRENCY of each process, default 16)")
	clients := fs.Int("clients", 0, "application goroutines: enqueue transactions, the peer's inserts, the ceiling's commits (default: pool − 2)")
	peerWorkers := fs.Int("peer-workers", 0, "River peer MaxWorkers (default 500)")
	batchSize := fs.Int("batch-size", 0, "override EMAIL_BATCH_SIZE (with EMAIL_BATCH_TIMEOUT = size × PerRowBudget); default: the shipped lease figures")
	trials := fs.Int("trials", 0, "email-section trials; the table shows the median (default 3; 1 with --quick; with --pool every pool section, default 1)")
	explain := fs.Bool("explain", false, "print EXPLAIN (ANALYZE, BUFFERS) of the claim and the dispatched mark on 10,000 rows")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to FILE")
	keep := fs.Bool("keep", false, "keep the postbox_bench_* database")
	scaleRows := fs.Int("scale-rows", 0, "pool-scale: sent rows (and attempts) seeded into the kept-history database (default 10000000; 200000 with --quick)")
	scaleRate := fs.Int("scale-rate", 0, "pool-scale, pool-webhook-scale: the steady load, msg/s (default 200)")
	lowRates := fs.String("low-rates", "", "pool-lowrate: the steady loads, msg/s, comma-separated (default 1,20,200; 20 with --quick)")
	lowDuration := fs.Duration("low-duration", 0, "pool-lowrate: length of each steady load (default 60s; 10s with --quick)")
	idleFor := fs.Duration("idle", 0, "pool-lowrate: how long each product is counted idle (default 60s; 10s with --quick)")
	scaleDuration := fs.Duration("scale-duration", 0, "pool-scale, pool-webhook-scale: length of each steady-load run (default 120s; 20s with --quick)")
	scaleBacklog := fs.Int("scale-backlog", 0, "pool-scale, pool-webhook-scale: rows of the backlog drains (default 20000; 5000 with --quick)")
	tracing := fs.Bool("tracing", false, "pool-backlog: also run postbox with tracing on (every span sampled, OTLP/HTTP to a receiver in the bench process) beside it off")
	retentionRows := fs.Int("retention-rows", 0, "pool-retention: rows seeded into each history log over 30 days (default 1000000; 100000 with --quick)")
	webhookScaleEvents := fs.Int("webhook-scale-events", 0, "pool-webhook-scale: delivered events (each with its delivery and attempt) seeded into the kept-history database (default 2000000; 100000 with --quick)")
	isolationEvents := fs.Int("isolation-events", 0, "pool-webhook-isolation: events enqueued at random tenants of 1,000 (default 20000; 2000 with --quick)")
	webhookEvents := fs.Int("webhook-events", 0, "pool-webhook, pool-webhook-tenants: events of each backlog (default 3000; 600 with --quick)")
	webhookEndpoints := fs.String("webhook-endpoints", "", "pool-webhook: endpoints per event, comma-separated, each in turn (default 1,10)")
	webhookReplicas := fs.String("webhook-replicas", "", "pool-webhook*: worker processes, comma-separated, each in turn; the other webhook sections run the largest (default 1,3)")
	webhookConcurrency := fs.Int("webhook-concurrency", 0, "pool-webhook*: WEBHOOK_CONCURRENCY of each process (default 16)")
	receiverDelay := fs.Duration("receiver-delay", -1, "pool-webhook: the receivers' time before they answer; 0 answers at once (default 50ms)")
	webhookLoad := fs.Duration("webhook-load", 0, "pool-webhook-ratelimit, -retry, -breaker: how long the load is offered (default 60s; 15s with --quick)")
	webhookSettle := fs.Duration("webhook-settle", 0, "pool-webhook-breaker: the wait after the load before delivered webhooks are counted (default 120s; 20s with --quick)")
	breakerOff := fs.String("breaker-off", "", "pool-webhook-breaker: the worker settings that turn the breaker off, comma-separated NAME=value (default "+strings.Join(bench.BreakerOffEnv, ",")+")")
	fairRows := fs.Int("fair-rows", 0, "pool-fair: customer A's invoices enqueued at once (default 20000; 5000 with --quick)")
	fairLoad := fs.Duration("fair-load", 0, "pool-fair: how long customer B enqueues a reset and an invoice every second (default 60s; 20s with --quick)")
	fairWait := fs.Duration("fair-wait", 0, "pool-fair: how long B's rows are awaited after B's load (default 12m; 3m with --quick)")
	fairBaseline := fs.String("fair-baseline", "", "pool-fair: a previous release's worker binary, run as the FIFO baseline path against this schema (default: none)")
	fairSnapshot := fs.String("fair-snapshot", "", "pool-fair: run each case again with a REPEATABLE READ snapshot held: off, postbox (its path only) or all (default postbox; off with --quick)")
	webhookFairEvents := fs.Int("webhook-fair-events", 0, "pool-webhook-fair: tenant A's events to its slow endpoint, enqueued at once (default 20000; 2000 with --quick)")
	webhookFairLoad := fs.Duration("webhook-fair-load", 0, "pool-webhook-fair: how long tenants B…K enqueue 5 events a second each; A alone is read for a third of it, at least 6s (default 60s; 15s with --quick)")
	webhookFairBacklog := fs.Int("webhook-fair-backlog", 0, "pool-webhook-fair: tenant A's fan-out backlog before B's single events (default 100000; 10000 with --quick)")
	webhookFairWait := fs.Duration("webhook-fair-wait", 0, "pool-webhook-fair: how long the other tenants' events are awaited after their load; what is missing then makes lower bounds (default 60s; 15s with --quick)")
	webhookFairBaseline := fs.String("webhook-fair-baseline", "", "pool-webhook-fair: a previous build's worker binary, run as a path of its own against this schema (default: none)")
	webhookFairHold := fs.Bool("webhook-fair-hold", false, "pool-webhook-fair: run the slow tenant's case and the fan-out backlog's again with a REPEATABLE READ snapshot held, on postbox's path")
	webhookFairHoldAll := fs.Bool("webhook-fair-hold-all", false, "pool-webhook-fair: with --webhook-fair-hold, hold the snapshot on every path: the baseline binary's (when given) and the River peer's too")
	keepSeed := fs.Bool("keep-seed", false, "pool-scale: keep the seeded database (postbox_scale_seed_*) for the next run, which reuses it while the migrations are unchanged")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		if *rate != "" {
			if *rates != "" && *rates != *rate {
				return program.Usagef("--rate %q and --rates %q: give one", *rate, *rates)
			}
			*rates = *rate
		}
		var inProcess, poolSections []string
		if *only != "" {
			for _, s := range strings.Split(*only, ",") {
				if s = strings.TrimSpace(s); slices.Contains(bench.PoolSections, s) {
					poolSections = append(poolSections, s)
					poolMode = true
				} else {
					inProcess = append(inProcess, s)
				}
			}
		}
		if poolMode && *only == "" {
			poolSections = bench.DefaultPoolSections
		}

		opts := bench.Default()
		if *quick {
			opts = bench.Quick()
		}
		for _, f := range []struct {
			v   int
			dst *int
		}{{*n, &opts.N}, {*events, &opts.Events}, {*endpoints, &opts.Endpoints}, {poolSize, &opts.PoolSize},
			{*concurrency, &opts.Concurrency}, {*clients, &opts.Clients}, {*peerWorkers, &opts.PeerWorkers}, {*trials, &opts.Trials}, {*batchSize, &opts.BatchSize}} {
			if f.v < 0 {
				return program.Usagef("a count flag is %d: want 0 (the default) or more", f.v)
			}
			if f.v > 0 {
				*f.dst = f.v
			}
		}
		if *limitedRate < 0 || *limitedRate > 10000 {
			return program.Usagef("--limited-rate %v: want 0 (none) to 10000 requests/s", *limitedRate)
		}
		opts.LimitedRate = *limitedRate
		if *duration > 0 {
			opts.Duration = *duration
		}
		if *rates != "" {
			var err error
			if opts.Rates, err = intList(*rates); err != nil {
				return program.Usagef("--rates %q: want positive integers, e.g. 200,1000", *rates)
			}
		}
		opts.Sections = inProcess
		opts.Explain = *explain
		opts.Progress = stderr
		if err := opts.Validate(); err != nil {
			return err
		}

		popts := bench.DefaultPool()
		if *quick {
			popts = bench.QuickPool()
		}
		if poolMode {
			popts.Sections = poolSections
			popts.Progress = stderr
			for _, f := range []struct {
				v   int
				dst *int
			}{{*n, &popts.N}, {*concurrency, &popts.Concurrency}, {*trials, &popts.Trials},
				{*scaleRows, &popts.ScaleRows}, {*scaleRate, &popts.ScaleRate}, {*scaleBacklog, &popts.ScaleBacklog},
				{*retentionRows, &popts.RetentionRows}, {*webhookEvents, &popts.WebhookEvents}, {*webhookConcurrency, &popts.WebhookConcurrency},
				{*webhookScaleEvents, &popts.WebhookScaleEvents}, {*isolationEvents, &popts.IsolationEvents}, {*fairRows, &popts.FairRows},
				{*webhookFairEvents, &popts.WebhookFairEvents}, {*webhookFairBacklog, &popts.WebhookFairBacklog}} {
				if f.v < 0 {
					return program.Usagef("a count flag is %d: want 0 (the default) or more", f.v)
				}
				if f.v > 0 {
					*f.dst = f.v
				}
			}
			if *scaleDuration > 0 {
				popts.ScaleDuration = *scaleDuration
			}
			if *lowDuration > 0 {
				popts.LowRateDuration = *lowDuration
			}
			if *idleFor > 0 {
				popts.IdleFor = *idleFor
			}
			if *fairLoad > 0 {
				popts.FairLoad = *fairLoad
			}
			if *fairWait > 0 {
				popts.FairWait = *fairWait
			}
			popts.FairBaseline = *fairBaseline
			popts.WebhookFairBaseline = *webhookFairBaseline
			if *webhookFairHoldAll && !*webhookFairHold {
				return program.Usagef("--webhook-fair-hold-all: give --webhook-fair-hold too")
			}
			popts.WebhookFairHold, popts.WebhookFairHoldAll = *webhookFairHold, *webhookFairHoldAll
			for _, d := range []struct {
				v   time.Duration
				dst *time.Duration
			}{{*webhookFairLoad, &popts.WebhookFairLoad}, {*webhookFairWait, &popts.WebhookFairWait}} {
				if d.v > 0 {
					*d.dst = d.v
				}
			}
			switch *fairSnapshot {
			case "":
			case "off":
				popts.FairHold, popts.FairHoldAll = false, false
			case "postbox":
				popts.FairHold, popts.FairHoldAll = true, false
			case "all":
				popts.FairHold, popts.FairHoldAll = true, true
			default:
				return program.Usagef("--fair-snapshot %q: want off, postbox or all", *fairSnapshot)
			}
			if *receiverDelay >= 0 {
				popts.ReceiverDelay = *receiverDelay
			}
			if *webhookLoad > 0 {
				popts.WebhookLoad = *webhookLoad
			}
			if *webhookSettle > 0 {
				popts.WebhookSettle = *webhookSettle
			}
			if *breakerOff != "" {
				popts.BreakerOff = strings.Split(*breakerOff, ",")
			}
			for _, l := range []struct {
				flag, v string
				dst     *[]int
			}{{"--webhook-endpoints", *webhookEndpoints, &popts.WebhookFanouts}, {"--webhook-replicas", *webhookReplicas, &popts.WebhookReplicas},
				{"--low-rates", *lowRates, &popts.LowRates}} {
				if l.v == "" {
					continue
				}
				var err error
				if *l.dst, err = intList(l.v); err != nil {
					return program.Usagef("%s %q: want positive integers, e.g. 1,3", l.flag, l.v)
				}
			}
			popts.KeepSeed = *keepSeed
			popts.Tracing = *tracing
			if *duration > 0 {
				popts.Duration = *duration
			}
			if *peerWorkers > 0 {
				popts.PeerWorkers = *peerWorkers
			}
			if *relayDelay >= 0 {
				popts.RelayDelay = *relayDelay
			}
			if *rates != "" {
				popts.Rates = opts.Rates
			}
			if *replicas != "" {
				var err error
				if popts.Replicas, err = intList(*replicas); err != nil {
					return program.Usagef("--replicas %q: want positive integers, e.g. 1,3", *replicas)
				}
			}
			if err := popts.Validate(); err != nil {
				return err
			}
		}

		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}

		var err error
		if !poolMode || len(inProcess) > 0 {
			rep, rerr := bench.Run(ctx, opts, *keep, "DATABASE_URL")
			err = printReport(stdout, rep, rerr)
		}
		if poolMode && err == nil {
			rep, rerr := bench.RunPool(ctx, popts, *keep, "DATABASE_URL")
			err = printReport(stdout, rep, rerr)
		}
		return err
	}
}

func printReport(stdout io.Writer, rep *bench.Report, err error) error {
	if rep != nil && len(rep.Rows) > 0 {
		if perr := rep.Print(stdout); perr != nil && err == nil {
			err = perr
		}
	}
	if errors.Is(err, bench.ErrCheck) {
		return fmt.Errorf("%w; the figures above are incomplete", err)
	}
	return err
}

// intList parses "200,1000" into positive integers.
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q: want a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// poolFlag is --pool: alone it turns the pool sections on; with a number
// (--pool=32) it is the pgx pool size, as the flag was before the pool
// sections existed.
type poolFlag struct {
	mode *bool
	size *int
}

func (f *poolFlag) IsBoolFlag() bool { return true }

func (f *poolFlag) String() string {
	if f.mode != nil && *f.mode {
		return "true"
	}
	return "false"
}

func (f *poolFlag) Set(s string) error {
	if v, err := strconv.ParseBool(s); err == nil {
		*f.mode = v
		return nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return fmt.Errorf("--pool %q: want no value (the pool sections) or a pgx pool size", s)
	}
	*f.size = v
	return nil
}
