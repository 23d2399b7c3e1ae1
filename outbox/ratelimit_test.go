package outbox

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// insertBacklog writes n raw rows in one statement, due over the last n
// milliseconds (inside the claim window: see insertRows).
func insertBacklog(t *testing.T, db DB, n int) {
	t.Helper()
	body, err := json.Marshal(rawPayload("ada@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(testCtx(t), `INSERT INTO email_outbox (kind, customer_id, payload, next_attempt_at)
SELECT 'raw', 'cus_test', $1::jsonb, now() - make_interval(secs => ($2 - i) / 1000.0)
FROM generate_series(1, $2::int) i`, body, n); err != nil {
		t.Fatal(err)
	}
}

// timedClaim is one claim as a lane made it: when it was asked for, when
// it returned, and how many rows it took.
type timedClaim struct {
	began, ended time.Time
	rows         int
}

// timedSource is a Dispatcher as an engine.Source that records its claims.
type timedSource struct {
	d      *Dispatcher
	mu     *sync.Mutex
	claims *[]timedClaim
}

func (s timedSource) Claim(ctx context.Context, n int) (engine.Claim, error) {
	began := time.Now()
	c, err := emailSource{s.d}.Claim(ctx, n)
	ended := time.Now()
	s.mu.Lock()
	*s.claims = append(*s.claims, timedClaim{began, ended, c.Rows})
	s.mu.Unlock()
	return c, err
}

// Three dispatchers (three replicas) claim one backlog at once, each
// through its own lane, with EMAIL_RATE_LIMIT = 20. Every claim's bucket
// step happens between the moment it was asked for and the moment it
// returned, so for any two claims a and b, the rows of the claims asked
// for no earlier than a and returned no later than b are at most
// rate × (b.ended − a.began) + burst. A slow machine claims less, never
// more: the bound cannot fail for want of speed. Without the bucket the
// lanes take the whole backlog in the first claims.
func TestRateLimit_ConcurrentLanesNeverClaimMoreThanTheBucket(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	const rate, backlog = 20.0, 300
	insertBacklog(t, pool, backlog)
	var mu sync.Mutex
	var claims []timedClaim
	var wg sync.WaitGroup
	for range 3 {
		d := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) { c.RateLimit = rate; c.Concurrency = 4 })
		lane := engine.NewLane(engine.LaneConfig{Name: table.Name, Source: timedSource{d, &mu, &claims}, Slots: d.slots})
		wg.Go(func() {
			if _, err := lane.Run(ctx, engine.RunOptions{Window: 1500 * time.Millisecond}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	slices.SortFunc(claims, func(a, b timedClaim) int { return a.began.Compare(b.began) })
	var total int
	for _, c := range claims {
		total += c.rows
	}
	if total == 0 || total == backlog {
		t.Fatalf("%d of %d rows claimed in %d claims: the window must end with rows claimed and rows left", total, backlog, len(claims))
	}
	for i, a := range claims {
		for _, b := range claims[i:] {
			var rows int
			for _, c := range claims[i:] {
				if !c.ended.After(b.ended) {
					rows += c.rows
				}
			}
			window := b.ended.Sub(a.began).Seconds()
			if limit := rate*window + burst(rate); float64(rows) > limit+1e-9 {
				t.Fatalf("%d rows claimed within %.3f s, more than rate × window + burst = %.2f", rows, window, limit)
			}
		}
	}
	var claimed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox WHERE attempts > 0`).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != total {
		t.Fatalf("%d rows claimed in the table, the lanes counted %d", claimed, total)
	}
}

// Concurrent drains of three dispatchers under a rate send every row,
// each once: a drain whose claim the bucket held short waits for tokens
// instead of taking the table for idle.
func TestRateLimit_ConcurrentDrainsSendEveryRowOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	const rows = 40
	insertBacklog(t, pool, rows)
	sender := newFakeSender(nil)
	var sent atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		d := newDispatcher(t, pool, sender, func(c *Config) { c.RateLimit = 50; c.Concurrency = 2 })
		wg.Go(func() {
			for sent.Load() < rows && ctx.Err() == nil {
				res, err := d.Drain(ctx, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				sent.Add(int32(res.Sent))
			}
		})
	}
	wg.Wait()
	if n := sent.Load(); n != rows {
		t.Fatalf("%d sent, want %d", n, rows)
	}
	var dispatched int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox WHERE status = 'dispatched' AND attempts = 1`).Scan(&dispatched); err != nil {
		t.Fatal(err)
	}
	if dispatched != rows || len(sender.messages()) != rows {
		t.Fatalf("%d rows dispatched at their first attempt, %d messages sent; want %d of each", dispatched, len(sender.messages()), rows)
	}
}

// A claim the bucket held short says when to claim again (Claim.Again),
// so the lane neither hot-polls nor waits for its Poll; a claim the bucket
// did not bound says nothing. The rate is one token in 100 s, so no token
// comes back while the test runs, however slow the machine.
func TestRateLimit_AShortClaimSaysWhenTokensComeBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	insertBacklog(t, pool, 3)
	d := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) { c.RateLimit = 0.01 })
	setTokens := func(tokens float64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE postbox_rate_buckets SET tokens = $1, at = clock_timestamp() WHERE name = 'email'`, tokens); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		tokens    float64
		wantRows  int
		wantAgain bool
	}{
		{"an empty bucket: no row, and when a token comes back", 0, 0, true},
		{"one token: one row of three, and when the next comes back", 1, 1, true},
		{"one token: one row of two, and when the next comes back", 1, 1, true},
		{"one token: the last row", 1, 1, true},
		{"a token and nothing due: no wait", 1, 0, false},
	} {
		setTokens(tc.tokens)
		c, err := emailSource{d}.Claim(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range c.Units {
			u.Run(ctx)
		}
		if c.Rows != tc.wantRows || (c.Again > 0) != tc.wantAgain {
			t.Fatalf("%s: %d rows, Again %s; want %d rows, Again set %v", tc.name, c.Rows, c.Again, tc.wantRows, tc.wantAgain)
		}
		if tc.wantAgain && c.Again < 10*time.Second {
			t.Fatalf("%s: Again %s, want about the 100 s a token takes at 0.01/s (the lane caps it at its Poll)", tc.name, c.Again)
		}
	}
}

// EMAIL_RATE_LIMIT: unset or 0 is no limit; anything that is not a number
// from 0 to MaxRateLimit stops the boot naming the variable.
func TestRateLimitFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value string
		set   bool
		want  float64
		ok    bool
	}{
		{set: false, want: 0, ok: true},
		{value: "", set: true, want: 0, ok: true},
		{value: "0", set: true, want: 0, ok: true},
		{value: "50", set: true, want: 50, ok: true},
		{value: "0.5", set: true, want: 0.5, ok: true},
		{value: "10000", set: true, want: 10000, ok: true},
		{value: "10001", set: true},
		{value: "-1", set: true},
		{value: "NaN", set: true},
		{value: "fast", set: true},
		{value: "50/s", set: true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Parallel()
			got, err := RateLimitFromEnv(func(k string) (string, bool) {
				if k == RateLimitEnv && tc.set {
					return tc.value, true
				}
				return "", false
			})
			switch {
			case tc.ok && (err != nil || got != tc.want):
				t.Fatalf("RateLimitFromEnv(%q) = %v, %v; want %v", tc.value, got, err, tc.want)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), RateLimitEnv)):
				t.Fatalf("RateLimitFromEnv(%q) = %v, %v; want an error naming %s", tc.value, got, err, RateLimitEnv)
			}
		})
	}
}
