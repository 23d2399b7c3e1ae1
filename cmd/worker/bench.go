package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/postbox/postbox/internal/bench"
)

func init() {
	register(command{
		Name: "bench",
		Usage: "[--quick] [--n 10000] [--only email,enqueue,latency,webhook,ceiling] [--explain] [--keep] [-h for more] " +
			"— postbox against one River job per message, on a fresh database (docs/PERFORMANCE.md)",
		Run: runBench,
	})
}

func runBench(ctx context.Context, env *Env, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	quick := fs.Bool("quick", false, "the CI preset: N=1500, 2 s latency runs, 100 webhook events, one trial (under a minute on a quiet 2-core machine)")
	n := fs.Int("n", 0, "email rows per path (default 10000; 1500 with --quick)")
	rates := fs.String("rates", "", "offered loads of the latency section, msg/s, comma-separated (default 200,1000)")
	duration := fs.Duration("duration", 0, "length of each latency run (default 10s; 2s with --quick)")
	events := fs.Int("events", 0, "webhook events (default 1000; 100 with --quick)")
	endpoints := fs.Int("endpoints", 0, "webhook endpoints, one loopback receiver each (default 10)")
	only := fs.String("only", "", "comma-separated sections to run: "+strings.Join(bench.AllSections, ","))
	poolSize := fs.Int("pool", 0, "pgx MaxConns per path (default 32)")
	concurrency := fs.Int("concurrency", 0, "postbox batches in flight in the email drain, as EMAIL_CONCURRENCY (default 200)")
	clients := fs.Int("clients", 0, "application goroutines: enqueue transactions, the peer's inserts, the ceiling's commits (default: pool − 2)")
	peerWorkers := fs.Int("peer-workers", 0, "River peer MaxWorkers (default 500)")
	batchSize := fs.Int("batch-size", 0, "override EMAIL_BATCH_SIZE (with EMAIL_BATCH_TIMEOUT = size × PerRowBudget); default: the ADR-072 figures")
	trials := fs.Int("trials", 0, "email-section trials; the table shows the median (default 3; 1 with --quick)")
	explain := fs.Bool("explain", false, "print EXPLAIN (ANALYZE, BUFFERS) of the claim and the dispatched mark on 10,000 rows")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to FILE")
	keep := fs.Bool("keep", false, "keep the postbox_bench_* database")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return errUsage
	}

	opts := bench.Default()
	if *quick {
		opts = bench.Quick()
	}
	for _, f := range []struct {
		v   int
		dst *int
	}{{*n, &opts.N}, {*events, &opts.Events}, {*endpoints, &opts.Endpoints}, {*poolSize, &opts.PoolSize},
		{*concurrency, &opts.Concurrency}, {*clients, &opts.Clients}, {*peerWorkers, &opts.PeerWorkers}, {*trials, &opts.Trials}, {*batchSize, &opts.BatchSize}} {
		if f.v < 0 {
			return errUsage
		}
		if f.v > 0 {
			*f.dst = f.v
		}
	}
	if *duration > 0 {
		opts.Duration = *duration
	}
	if *rates != "" {
		opts.Rates = nil
		for _, s := range strings.Split(*rates, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || r <= 0 {
				return fmt.Errorf("--rates %q: want positive integers, e.g. 200,1000", *rates)
			}
			opts.Rates = append(opts.Rates, r)
		}
	}
	if *only != "" {
		opts.Sections = strings.Split(*only, ",")
	}
	opts.Explain = *explain
	opts.Progress = env.Stderr
	if err := opts.Validate(); err != nil {
		return err
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

	rep, err := bench.Run(ctx, opts, *keep, "DATABASE_URL")
	if rep != nil && len(rep.Rows) > 0 {
		if perr := rep.Print(env.Stdout); perr != nil && err == nil {
			err = perr
		}
	}
	if errors.Is(err, bench.ErrCheck) {
		return fmt.Errorf("%w; the figures above are incomplete", err)
	}
	return err
}
