package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// percentiles returns the nearest-rank percentiles ps (0–100) of ds.
func percentiles(ds []time.Duration, ps ...float64) []time.Duration {
	out := make([]time.Duration, len(ps))
	if len(ds) == 0 {
		return out
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	for i, p := range ps {
		k := int(p/100*float64(len(s))+0.999999) - 1 // ceil(p·n) − 1
		out[i] = s[min(max(k, 0), len(s)-1)]
	}
	return out
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns the
// wall time and each call's duration. The first error stops the handing out
// of further work and is returned.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) (time.Duration, []time.Duration, error) {
	lat := make([]time.Duration, n)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t := time.Now()
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
					return
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	return time.Since(start), lat, errors.Join(errs...)
}

// countWindows counts the times of at in each of n windows of width from
// origin: window k holds [origin + k·width, origin + (k+1)·width). Times
// outside every window are left out.
func countWindows(at []time.Time, origin time.Time, width time.Duration, n int) []int {
	out := make([]int, n)
	for _, a := range at {
		if a.Before(origin) {
			continue
		}
		if k := int(a.Sub(origin) / width); k < n {
			out[k]++
		}
	}
	return out
}

// burst is a run of arrivals with no quiet gap inside it.
type burst struct {
	start time.Time
	n     int
}

// bursts groups the sorted times at into runs split wherever two
// neighbours are gap or more apart: what a receiver sees of an endpoint
// breaker, which sends a burst, goes quiet while open and probes after
// each cool-down.
func bursts(at []time.Time, gap time.Duration) []burst {
	var out []burst
	for i, a := range at {
		if i == 0 || a.Sub(at[i-1]) >= gap {
			out = append(out, burst{start: a})
		}
		out[len(out)-1].n++
	}
	return out
}
