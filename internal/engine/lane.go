package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine/tracing"
)

// Lane defaults.
const (
	// DefaultPoll is how often an idle Lane claims without a wake-up: the
	// fallback for a lost notification, and the retry pass's clock. An
	// idle replica runs one claim per Lane per DefaultPoll.
	DefaultPoll = time.Second

	// DefaultHotPoll is how soon a Lane claims once more after a wake-up's
	// claim, or a claim that found rows. The wake-up trigger lets one
	// transaction per table and 10 ms slot notify; another that inserted
	// in the same slot and committed just after the notifier is not seen
	// by the notifier's claim, and this one claim finds it. One, not a
	// stream: a Lane that polled on for seconds after any activity was
	// never cold at a few messages a second, and spent most of its
	// claims finding nothing.
	DefaultHotPoll = 20 * time.Millisecond

	// DefaultHotFor is how long a Lane without wake-ups (Wake nil: behind
	// a transaction pooler with no direct URL to LISTEN on) goes on
	// claiming at HotPoll after a claim that found rows: no wake-up will
	// tell it of the next row, so under a steady load its hot poll, not
	// its idle one, is what a row waits for. A Source that holds due rows
	// back where no claim sees them (the webhook retry claim skips an
	// endpoint's rows while its in-flight cap is full) sets it too.
	DefaultHotFor = 2 * time.Second

	// DefaultSweepEvery is how often a Sweeper's sweep runs, pool-wide
	// when the Lane has a SweepGate: the longest a row committed behind
	// the claim window (its transaction ran for more than the window's
	// margin) waits for the sweep to move it into the window.
	DefaultSweepEvery = 5 * time.Second
)

// Unit is claimed work that runs on its own goroutine while holding one
// slot: an email batch (one SMTP connection, rows in turn), a webhook
// fan-out, a webhook delivery attempt.
type Unit interface {
	// Run works the unit and records every row it holds with a CAS mark
	// (or releases it), returning what it did.
	Run(ctx context.Context) Tally

	// Panicked is called instead of Run's return when Run panicked with
	// value v: it records the unit's rows that Run did not record (a
	// transient failure carrying the panic value) and returns the unit's
	// whole tally.
	Panicked(ctx context.Context, v any) Tally
}

// Expiring is a Unit that must start by a deadline: its lease leaves room
// for its work and its mark only until then. A Claim may return more
// Expiring units than the slots it was given — a webhook fan-out's
// deliveries, born leased to this process — and the Lane starts the rest
// as slots free, each by its deadline; one it cannot start in time, or
// once the Lane stops or its window closes, it releases instead.
type Expiring interface {
	Unit

	// StartBy is the last moment the unit may start.
	StartBy() time.Time

	// Release gives the unit's rows back unstarted, due again at once, and
	// counts them (Tally.Released).
	Release(ctx context.Context) Tally
}

// Ranked is a Unit with an age, lower being older — an ordered delivery's
// place in its key. One that waits for a slot beyond its claim's waits in
// rank (Slots.AcquireRanked), so that older work goes first; Rank's false
// means it has none, and waits as any other.
type Ranked interface {
	Rank() (rank int64, ok bool)
}

// Claim is what a Source's claim took.
type Claim struct {
	// Units hold one slot each. Beyond the slots the claim was given, only
	// Expiring units may be returned.
	Units []Unit
	Rows  int  // rows claimed (an email batch holds several)
	Full  bool // the claim took all it asked for: more rows may be due

	// Tally is what the claim itself did besides taking rows: the events
	// a webhook fan-out made, the rows it failed or released.
	Tally Tally

	// Crowded says due rows were left because their keys hold their
	// share of the slots (Slots.Crowded): the Lane claims again when a
	// slot is given back, a wake-up comes or its poll ends.
	Crowded bool

	// Again, when above zero, says a limit of the Source's own — a
	// pool-wide rate's token bucket — held due rows back, and when it
	// will let more through. The Lane claims again then (at most its
	// Poll later), not sooner: neither a wake-up nor its hot poll can
	// get rows the bucket has no tokens for, and a drain goes on.
	Again time.Duration
}

// Source is one outbox-shaped table as a Lane drains it.
type Source interface {
	// Claim claims, in one short statement, the rows for at most n units
	// (the Lane holds n slots for them) and returns them as Units.
	Claim(ctx context.Context, n int) (Claim, error)
}

// Scheduled is a Source whose rows come due by the clock (a retry's
// back-off) rather than by a commit that wakes the Lane: a Lane about to
// wait out its idle Poll asks it how soon its next row comes due, and
// claims again then if that is sooner. Hot polls do not ask.
type Scheduled interface {
	// NextDue is how soon the first row not yet due comes due: zero when
	// none is pending, or when it cannot tell.
	NextDue(ctx context.Context) time.Duration
}

// Sweeper is a Source whose claims start at a window's edge rather than at
// the start of its table's claim index (claim.Window): the rows that can
// become due behind the edge — a transaction that committed long after it
// began, a due time written in the past — are moved into the window by
// Sweep, which the Lane runs at the start of every Run and every
// SweepEvery, on a goroutine of its own, so a slow sweep never holds a
// claim back.
type Sweeper interface {
	// Sweep moves the rows due behind the window into it and says how
	// many, and the first few ids.
	Sweep(ctx context.Context) (rows int, first []string, err error)
}

// LaneConfig configures a Lane. Source and Slots are required.
type LaneConfig struct {
	Name   string // the table, for logs
	Source Source
	Slots  *Slots

	// Wake receives a value when rows may be due (Waker.Subscribe); nil
	// means the Lane polls only.
	Wake <-chan struct{}

	// Poll and HotPoll: zero means DefaultPoll and DefaultHotPoll.
	// HotFor, if set, keeps the Lane claiming at HotPoll that long after
	// a claim that found rows or a wake-up, not just once; zero means
	// DefaultHotFor for a Lane with no Wake, and none for one with.
	Poll, HotPoll, HotFor time.Duration

	// SweepEvery is how often a Sweeper Source is swept; zero means
	// DefaultSweepEvery. SweepGate, if set, makes it pool-wide: a sweep
	// runs only where SweepGate.Take succeeds, at most once per its Lease
	// across every replica (one sweep covers every lane: see claim.Sweep).
	SweepEvery time.Duration
	SweepGate  *Gate

	// Refill is how many free slots a Lane with a backlog waits for before
	// its next claim, so that one claim serves many units, the way River's
	// producer fetches for all its idle workers; zero means an eighth of
	// the slots. A Lane with nothing running claims for one free slot.
	Refill int

	Logger  *slog.Logger // nil discards
	Metrics *Metrics     // nil counts nothing

	// Tracer makes a span of every claim that took rows (none for the
	// claims of an idle poll); the units run under it, so each row's span
	// links to the claim that took it. Nil means the global provider's.
	Tracer trace.Tracer
}

// Lane runs a Source on one replica: it claims while slots are free and
// rows are due, and sleeps until a wake-up, its poll or a freed slot.
type Lane struct {
	cfg      LaneConfig
	logger   *slog.Logger
	stopOnce sync.Once
	stopCtx  context.Context
	stop     context.CancelFunc
}

// NewLane returns a Lane.
func NewLane(cfg LaneConfig) *Lane {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.HotPoll <= 0 {
		cfg.HotPoll = DefaultHotPoll
	}
	if cfg.HotFor <= 0 && cfg.Wake == nil {
		cfg.HotFor = DefaultHotFor
	}
	if cfg.Refill <= 0 {
		cfg.Refill = max(cfg.Slots.Cap()/8, 1)
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = DefaultSweepEvery
	}
	if cfg.Tracer == nil {
		cfg.Tracer = tracing.Tracer(nil)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	stopCtx, stop := context.WithCancel(context.Background())
	return &Lane{cfg: cfg, logger: logger, stopCtx: stopCtx, stop: stop}
}

// Stop is the soft stop: no Run claims again. Units already running
// finish under their own budgets.
func (l *Lane) Stop() { l.stopOnce.Do(l.stop) }

// Stopped reports whether Stop was called.
func (l *Lane) Stopped() bool { return l.stopCtx.Err() != nil }

// RunOptions bound one Run.
type RunOptions struct {
	// Window is how long Run keeps claiming; zero means until ctx ends or
	// the Lane stops. Units started inside the window run to completion:
	// give ctx at least Window plus the longest unit.
	Window time.Duration

	// UntilIdle returns as soon as a claim comes back short (nothing more
	// due), once the units started are done: a drain, for tests, the
	// bench and one-off passes, instead of a shift.
	UntilIdle bool

	// ClaimsDone, if set, is called once Run has made its last claim,
	// before it waits for the units it started: a gated pass hands its
	// gate on there, its successor claiming while its units finish.
	ClaimsDone func()
}

// Run claims and starts units until the window ends, ctx ends or the Lane
// stops (or, with UntilIdle, nothing is due), then waits for the units it
// started. Several Runs of one Lane may overlap (a shift handing over to
// the next); they share the Lane's slots, so the cap still holds.
//
// The error joins the claim failures; the units' own outcomes, panics
// included, are in the Tally.
func (l *Lane) Run(ctx context.Context, opts RunOptions) (Tally, error) {
	claimCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.Window > 0 {
		var cancelWindow context.CancelFunc
		claimCtx, cancelWindow = context.WithTimeout(claimCtx, opts.Window)
		defer cancelWindow()
	}
	defer context.AfterFunc(l.stopCtx, cancel)()
	// Claimed units beyond the free slots wait for theirs until waitCtx
	// ends, then are released. A shift's end with its window, for the
	// next shift to claim them; a drain's not when its last claim finds
	// nothing — it waits for the units it claimed, and those are due — but
	// only with ctx or the Lane's stop.
	waitCtx := claimCtx
	if opts.UntilIdle {
		var cancelWait context.CancelFunc
		waitCtx, cancelWait = context.WithCancel(ctx)
		defer cancelWait()
		defer context.AfterFunc(l.stopCtx, cancelWait)()
	}

	r := &run{lane: l, ctx: ctx}
	if s, ok := l.cfg.Source.(Sweeper); ok {
		if opts.UntilIdle {
			// A drain takes what is due, late rows too, and then ends.
			l.sweep(claimCtx, s)
		} else {
			r.wg.Go(func() { l.sweepEvery(claimCtx, s) })
		}
	}
	var (
		errs    []error
		due     = true // claim at once: rows may be waiting since before this run
		backlog = false
		// hot: claim once more after HotPoll (DefaultHotPoll says why),
		// set by a claim that found rows or followed a wake-up. A run
		// starts cold, and a claim that finds nothing without a wake-up
		// makes it cold: the Lane then waits for a wake-up, a freed
		// slot's claim, the next due row or its Poll.
		hot      bool
		crowded  bool          // the last claim left rows to keys holding their share: a freed slot is a reason to claim
		woke     bool          // a wake-up came since the last claim
		hotUntil time.Time     // with HotFor: hot till then, after rows or a wake-up
		again    time.Duration // the Source's limit holds rows back this long
		timer    = time.NewTimer(0)
	)
	defer timer.Stop()
	for claimCtx.Err() == nil {
		if !due && again > 0 {
			// Not on a wake-up: it stays in its channel for after the wait.
			timer.Reset(min(again, l.cfg.Poll))
			select {
			case <-timer.C:
			case <-claimCtx.Done():
				continue
			}
			due = true
		}
		if !due {
			wait := l.cfg.Poll
			if hot {
				wait = l.cfg.HotPoll
			} else if s, ok := l.cfg.Source.(Scheduled); ok {
				if next := s.NextDue(claimCtx); next > 0 {
					wait = min(wait, next)
				}
			}
			timer.Reset(wait)
			var freed <-chan struct{} // nil: never
			if crowded {
				freed = l.cfg.Slots.Loosened()
			}
			select {
			case <-l.cfg.Wake:
				woke = true
			case <-freed:
			case <-timer.C:
			case <-claimCtx.Done():
				continue
			}
			due = true
		}
		again, crowded = 0, false
		least := 1
		if backlog && r.running() > 0 && !l.cfg.Slots.Shared() {
			least = l.cfg.Refill
		}
		n := l.cfg.Slots.Acquire(claimCtx, least, l.cfg.Slots.Cap())
		if n == 0 {
			continue // the window closed or the Lane stopped while waiting
		}
		began := time.Now()
		c, err := l.cfg.Source.Claim(claimCtx, n)
		l.cfg.Slots.Return(n - min(len(c.Units), n))
		r.claimed(c)
		if (c.Rows > 0 || woke) && l.cfg.HotFor > 0 {
			hotUntil = time.Now().Add(l.cfg.HotFor)
		}
		unitCtx := r.ctx
		if c.Rows > 0 {
			var span trace.Span
			unitCtx, span = l.cfg.Tracer.Start(r.ctx, tracing.SpanClaim, trace.WithTimestamp(began), trace.WithAttributes(
				tracing.Table.String(l.cfg.Name), tracing.Rows.Int(c.Rows), tracing.Units.Int(len(c.Units))))
			span.End()
		}
		for i, u := range c.Units {
			k, keyed := u.(Keyed)
			switch {
			case keyed && (i >= n || !l.cfg.Slots.Assign(k.SlotKey())):
				// A key's unit that its share keeps from a slot now
				// waits for one on its own, not in the Lane's way: the
				// next claim, for the other keys, goes on.
				r.startWhenFree(waitCtx, unitCtx, u)
				continue
			case i >= n && !r.slotFor(waitCtx, u):
				continue
			}
			r.start(unitCtx, u)
		}
		switch {
		case err != nil && claimCtx.Err() != nil:
			// The window closing mid-claim is the bound working.
		case err != nil:
			errs = append(errs, err)
			r.noteError(err)
			l.logger.Warn("claim failed; retrying at the next poll", "outbox", l.cfg.Name, "error", err.Error())
			due, backlog, hot = false, false, false
		case c.Full:
			due, backlog = true, true
		case c.Crowded:
			// Rows are due, but to keys that hold their share: claim
			// again as slots come back, or for another key's wake-up.
			due, backlog, crowded = false, false, true
		case c.Again > 0:
			// Rows are due but the Source's limit says not yet: wait for
			// it, even in a drain, which ends only when nothing is due.
			due, backlog, again = false, false, c.Again
		default:
			due, backlog = false, false
			hot = c.Rows > 0 || woke || time.Now().Before(hotUntil)
			if opts.UntilIdle {
				cancel()
			}
		}
		if err != nil && opts.UntilIdle {
			cancel()
		}
		woke = false
	}
	if opts.ClaimsDone != nil {
		opts.ClaimsDone()
	}
	return r.wait(), errors.Join(errs...)
}

// Work runs units that no claim of the Lane took (a webhook replay's
// deliveries, born leased to this process) on the Lane's slots, as a claim's
// units beyond its slots run: each as a slot frees, by its StartBy if it is
// Expiring, released if it cannot start in time or once the Lane stops. It
// returns their tally once they are done.
func (l *Lane) Work(ctx context.Context, units []Unit) Tally {
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.stopCtx, cancel)()
	r := &run{lane: l, ctx: ctx, live: len(units)}
	for _, u := range units {
		if r.slotFor(waitCtx, u) {
			r.start(ctx, u)
		}
	}
	return r.wait()
}

// sweepEvery sweeps s at once and then every SweepEvery until ctx ends.
func (l *Lane) sweepEvery(ctx context.Context, s Sweeper) {
	ticker := time.NewTicker(l.cfg.SweepEvery)
	defer ticker.Stop()
	for {
		l.sweep(ctx, s)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// sweep runs one sweep, if the gate (when there is one) says it is this
// lane's turn. Errors are logged: the next sweep tries again.
func (l *Lane) sweep(ctx context.Context, s Sweeper) {
	if g := l.cfg.SweepGate; g != nil {
		ok, err := g.Take(ctx)
		if err != nil && ctx.Err() == nil {
			l.logger.Warn("sweep gate failed; sweeping at the next interval", "outbox", l.cfg.Name, "error", err.Error())
		}
		if !ok {
			return
		}
	}
	n, first, err := s.Sweep(ctx)
	l.cfg.Metrics.Swept(l.cfg.Name, n)
	switch {
	case err != nil && ctx.Err() == nil:
		l.logger.Warn("sweep failed; sweeping at the next interval", "outbox", l.cfg.Name, "moved", n, "error", err.Error())
	case n > 0:
		l.logger.Info("swept rows due behind the claim window into it (committed late, or due in the past)",
			"outbox", l.cfg.Name, "moved", n, "rows", first)
	}
}

// run is one Run's units in flight and their tally.
type run struct {
	lane *Lane
	ctx  context.Context
	wg   sync.WaitGroup

	mu    sync.Mutex
	tally Tally
	live  int
}

func (r *run) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live
}

func (r *run) claimed(c Claim) {
	r.mu.Lock()
	r.tally.Claims++
	r.tally.Claimed += c.Rows
	r.tally.Add(c.Tally)
	r.live += len(c.Units)
	r.mu.Unlock()
}

// slotFor waits for a slot for u, beyond those its claim was given: until
// u's StartBy, while ctx lasts. It reports whether it got one; if not, u
// is released (or, not being Expiring, left to wait for a slot on the run's
// own context).
func (r *run) slotFor(ctx context.Context, u Unit) bool {
	slots := r.lane.cfg.Slots
	e, ok := u.(Expiring)
	if !ok {
		if k, ok := u.(Keyed); ok {
			return slots.AcquireFor(r.ctx, k.SlotKey()) || r.release(u)
		}
		return slots.Acquire(r.ctx, 1, 1) == 1 || r.release(u)
	}
	wait, cancel := context.WithDeadline(ctx, e.StartBy())
	defer cancel()
	if rank, ok := rankOf(u); ok {
		if !slots.AcquireRanked(wait, rank) {
			return r.release(u)
		}
		if k, ok := u.(Keyed); ok {
			slots.Take(k.SlotKey())
		}
		return true
	}
	if k, ok := u.(Keyed); ok {
		return slots.AcquireFor(wait, k.SlotKey()) || r.release(u)
	}
	if slots.Acquire(wait, 1, 1) == 1 {
		return true
	}
	return r.release(u)
}

func rankOf(u Unit) (int64, bool) {
	if r, ok := u.(Ranked); ok {
		return r.Rank()
	}
	return 0, false
}

// release gives back u, which got no slot, and counts it out of the run;
// it reports false, so that u is not started.
func (r *run) release(u Unit) bool {
	var t Tally
	if e, ok := u.(Expiring); ok {
		t = e.Release(r.ctx)
	}
	r.mu.Lock()
	r.tally.Add(t)
	r.live--
	r.mu.Unlock()
	return false
}

func (r *run) noteError(err error) {
	r.mu.Lock()
	r.tally.NoteError(err.Error())
	r.mu.Unlock()
}

// startWhenFree waits, on a goroutine of its own, for a slot for u
// (slotFor, until wait ends), and runs u in it.
func (r *run) startWhenFree(wait, ctx context.Context, u Unit) {
	r.wg.Go(func() {
		if r.slotFor(wait, u) {
			r.work(ctx, u)
		}
	})
}

// start runs u on its own goroutine in a slot the Lane holds for it.
func (r *run) start(ctx context.Context, u Unit) {
	r.wg.Go(func() { r.work(ctx, u) })
}

// work runs u in the slot it holds, gives the slot back and counts u out
// of the run.
func (r *run) work(ctx context.Context, u Unit) {
	began := time.Now()
	t := r.lane.work(ctx, u)
	if k, ok := u.(Keyed); ok {
		r.lane.cfg.Slots.ReleaseFor(k.SlotKey(), time.Since(began))
	} else {
		r.lane.cfg.Slots.Release(1)
	}
	r.lane.cfg.Metrics.Panics(r.lane.cfg.Name, t.Panics)
	r.mu.Lock()
	r.tally.Add(t)
	r.live--
	r.mu.Unlock()
}

func (r *run) wait() Tally {
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tally
}

// work runs u, turning a panic into u's Panicked record. River recovers
// panics in a job's own goroutine only; this one is ours to guard.
func (l *Lane) work(ctx context.Context, u Unit) (t Tally) {
	defer func() {
		if v := recover(); v != nil {
			t = l.recovered(ctx, u, v, debug.Stack())
		}
	}()
	return u.Run(ctx)
}

func (l *Lane) recovered(ctx context.Context, u Unit, v any, stack []byte) (t Tally) {
	l.logger.Error("panic in a delivery unit; its rows are recorded as failed attempts",
		"outbox", l.cfg.Name, "panic", fmt.Sprint(v), "stack", string(stack))
	defer func() {
		if v2 := recover(); v2 != nil {
			// Recording failed too: the rows keep their leases and are
			// claimed again when those expire.
			l.logger.Error("panic while recording a panicked unit; its rows wait out their lease",
				"outbox", l.cfg.Name, "panic", fmt.Sprint(v2))
			t.Panics++
			t.NoteError((&PanicError{Value: v}).Error())
		}
	}()
	t = u.Panicked(ctx, v)
	t.Panics++
	t.NoteError((&PanicError{Value: v}).Error())
	return t
}
