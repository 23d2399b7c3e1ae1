package pgbouncer

import (
	"context"
	"sync"
	"time"
)

// Peaks are a watch's busiest moments: the most server connections linked
// to clients, and the most clients waiting for one, in the pools it
// counted.
type Peaks struct {
	ServersActive  int
	ClientsWaiting int
}

// WatchPeaks reads SHOW POOLS every interval, in the pools count selects,
// until the returned stop is called; stop waits for the last read and
// returns the peaks, and may be called again. A failed read is skipped:
// the watch reports what the pooler was asked, never fails what it
// watches.
func (b *Bouncer) WatchPeaks(ctx context.Context, every time.Duration, count func(Pool) bool) (stop func() Peaks) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu    sync.Mutex
		peaks Peaks
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if pools, err := b.Pools(ctx); err == nil {
				mu.Lock()
				for _, p := range pools {
					if count(p) {
						peaks.ServersActive = max(peaks.ServersActive, p.ServersActive)
						peaks.ClientsWaiting = max(peaks.ClientsWaiting, p.ClientsWaiting)
					}
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() Peaks {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return peaks
	}
}
