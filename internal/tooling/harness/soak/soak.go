package soak

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/migrations"
	"github.com/postbox/postbox/webhook"
)

// Worker settings the soak runs with. The retry schedules are compressed
// so transient faults retry in milliseconds, and the leases are cut as far
// as the code allows, so a killed worker's rows come back soon
// (docs/SOAK.md has the arithmetic):
//
//	email:   BatchSize 1 × PerRowBudget 60 s ≤ BatchTimeout 62 s < ClaimLease 60 s + 7 s = 67 s
//	webhook: birth lease 20 s; retry lease 1 × 13 s + 7 s = 20 s
//
// Two gates that leases.Validate does not check set the floor:
//   - a claimed email row starts only while a whole PerRowBudget is left of
//     its batch, so BatchTimeout must exceed PerRowBudget by the time the
//     claim takes; at exactly 60 s every row is claimed and released unsent;
//   - a webhook attempt starts only while DeliveryBudget + MarkTimeout
//     (18 s) are left of its lease, so LeaseSlack must exceed 5 s; below
//     that the retry worker claims and releases its deliveries forever.
const (
	backoffScale  = "0.0005" // email 1 min → 30 ms; webhook 5 s → 2.5 ms
	batchTimeout  = "62s"
	leaseSlack    = "7s"
	birthLease    = "20s"
	emailLease    = 67 * time.Second
	workerStopTTL = "10s"
)

// explainSlack is how long before a row's previous acceptance a crash or
// restart may have happened and still explain the next one: bytes a
// worker wrote just before it died can reach the sink and be accepted a
// moment after the kill.
const explainSlack = 5 * time.Second

// The least time between two acceptances of one row that a lease allows.
// A row is sent again only after the lease of the claim that sent it
// before has expired, so a resend sooner than this means a lease did not
// hold, whatever else happened; it is never explained.
//
//   - email: a row starts right after its claim; it is accepted, if at all,
//     within emailSendDone, and the lease runs 67 s: at least 12 s between
//     sends. 10 s allows for measurement.
//   - webhook: an attempt starts only while DeliveryBudget + MarkTimeout are
//     left of its lease and lasts at most DeliveryBudget, so it is accepted
//     at least MarkTimeout (5 s) before the lease ends. 4 s allows for
//     measurement.
const (
	// emailSendDone bounds claim → accepted: the batch's suppression
	// lookup, then the row's own suppression, render, dial and exchange
	// budgets: 55 s.
	emailSendDone = leases.SuppressionBudget + leases.SuppressionBudget + leases.BrandingBudget +
		leases.DialBudget + leases.ExchangeBudget
	emailMinResend   = emailLease - emailSendDone - 2*time.Second
	webhookMinResend = leases.MarkTimeout - time.Second
)

// staleMarkLag is how long after the duplicate a worker may log that its
// mark was dropped as stale: the slow worker marks after the sibling that
// re-claimed the row sent it again.
const staleMarkLag = emailLease + 10*time.Second

// Run performs a soak and returns its tally. The error is about the run
// itself (setup failed, ctx ended); whether the transport kept its promise
// is Tally.Problems.
func Run(ctx context.Context, opts Options) (*Tally, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	for opts.Seed == 0 {
		opts.Seed = rand.Uint64()
	}
	r := &run{
		opts:     opts,
		rng:      rand.New(rand.NewPCG(opts.Seed, 0x6b696c6c)),
		progress: opts.Progress,
	}
	if r.progress == nil {
		r.progress = io.Discard
	}
	defer r.close()
	return r.run(ctx)
}

// run is one soak's state.
type run struct {
	opts     Options
	rng      *rand.Rand
	progress io.Writer
	logMu    sync.Mutex

	logDir      string
	ownsLogDir  bool
	dbURL       string
	cluster     *pgserver.Cluster
	pool        *pgxpool.Pool
	leaderKills int
	mail        *mailFaults
	sink        *smtpsink.Sink
	receivers   []*receiver
	endpoints   []string // endpoint id per receiver
	fleet       *fleet
	load        *load

	start, chaosStart, chaosEnd, quietEnd time.Time
	restart                               *Restart
	stuck                                 stuckWatch
	finished                              bool
	unclean                               []string
}

// Restart is the Postgres restart: from the stop command to the server
// accepting connections again.
type Restart struct {
	Start, End time.Time
	Err        string
}

// logf writes a progress line; the loader, the fleet's watcher and the
// main loop all call it.
func (r *run) logf(format string, args ...any) {
	since := time.Duration(0)
	if !r.start.IsZero() {
		since = time.Since(r.start).Truncate(100 * time.Millisecond)
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintf(r.progress, "soak %7s  %s\n", since, fmt.Sprintf(format, args...))
}

func (r *run) run(parent context.Context) (*Tally, error) {
	r.start = time.Now()
	ctx, cancel := context.WithDeadline(parent, r.start.Add(r.opts.Timeout))
	defer cancel()
	r.logf("seed %d: %d emails, %d events × %d endpoints, %d workers, chaos %s (kill every %s–%s, Postgres restart at %.0f%%)",
		r.opts.Seed, r.opts.Emails, r.opts.Events, r.opts.Endpoints, r.opts.Workers, r.opts.Chaos,
		r.opts.KillEveryMin, r.opts.KillEveryMax, r.opts.PGRestartAt*100)
	if err := r.setUp(ctx); err != nil {
		return nil, fmt.Errorf("soak: set up: %w", err)
	}
	setupTook := time.Since(r.start)

	r.fleet = newFleet(r.opts.WorkerBinary, r.workerEnv(), r.logDir, r.opts.Workers, r.logf)
	if err := r.fleet.start(); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	r.logf("workers started; logs in %s", r.logDir)

	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	r.stuck.longest = map[string]time.Duration{}
	go func() {
		defer close(watchDone)
		r.watchStuck(watchCtx)
	}()
	r.chaosStart = time.Now()
	r.chaosEnd = r.chaosStart.Add(r.opts.Chaos)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		r.load.enqueue(loadCtx, r.pool, r.chaosStart, time.Duration(float64(r.opts.Chaos)*r.opts.LoadSpread), r.logf)
	}()
	chaosErr := r.chaos(ctx)
	if chaosErr != nil {
		stopLoad()
		r.ownsLogDir = false // keep the workers' logs for a look
		chaosErr = fmt.Errorf("%w (worker logs kept in %s)", chaosErr, r.logDir)
	}
	<-loadDone
	if chaosErr == nil {
		r.logf("chaos over: %d crashes; waiting for every row to be terminal", len(r.crashes()))
		r.finished = r.quiet(ctx)
	}
	r.quietEnd = time.Now()
	stopWatch()
	<-watchDone
	r.unclean = r.fleet.stop(30 * time.Second)
	if chaosErr != nil {
		return nil, chaosErr
	}
	if parent.Err() != nil {
		return nil, parent.Err()
	}
	if !r.finished {
		r.logf("timeout %s reached with rows still not terminal", r.opts.Timeout)
	}

	tctx, tcancel := context.WithTimeout(context.WithoutCancel(parent), 2*time.Minute)
	defer tcancel()
	t, err := r.tally(tctx)
	if err != nil {
		return nil, fmt.Errorf("soak: tally: %w", err)
	}
	t.Setup = setupTook
	if len(t.Problems()) > 0 {
		r.ownsLogDir = false // keep the evidence
	}
	if !r.ownsLogDir {
		t.LogDir = r.logDir
	}
	return t, nil
}

func (r *run) setUp(ctx context.Context) error {
	r.logDir = r.opts.LogDir
	if r.logDir == "" {
		dir, err := os.MkdirTemp("", "postbox-soak-")
		if err != nil {
			return err
		}
		r.logDir, r.ownsLogDir = dir, true
	} else if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return err
	}

	// Our own cluster: the soak restarts it, which must never happen to a
	// server anyone else uses.
	var err error
	if r.cluster, err = pgserver.StartCluster(ctx, slog.New(slog.DiscardHandler)); err != nil {
		return err
	}
	dbURL, err := pgserver.CreateDatabase(ctx, r.cluster.URL, "postbox_soak", "")
	if err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 8
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	m, err := migrations.New(r.pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	err = m.Up(ctx)
	m.Close()
	if err != nil {
		return err
	}
	r.logf("throwaway Postgres up at %s", r.cluster.URL)

	r.mail = newMailFaults(r.opts.Faults, r.opts.Seed)
	if r.sink, err = smtpsink.Start(r.mail.options()); err != nil {
		return err
	}
	for i := range r.opts.Endpoints {
		if r.opts.Events == 0 {
			break
		}
		rc, err := startReceiver(r.opts.Faults, r.opts.Seed+uint64(i)+1)
		if err != nil {
			return err
		}
		r.receivers = append(r.receivers, rc)
		ep, err := webhook.CreateEndpoint(ctx, r.pool, webhook.Settings{}, webhook.EndpointParams{URL: rc.URL(), Secret: rc.secret})
		if err != nil {
			return err
		}
		r.endpoints = append(r.endpoints, ep.ID)
	}
	r.load = newLoad(r.rng, r.opts.Emails, r.opts.Events, r.opts.Faults.SMTPPermanent)
	r.mail.setPermanent(r.load.permanentIDs())
	r.dbURL = dbURL
	return nil
}

// workerEnv is every worker's environment: nothing inherited but PATH and
// HOME, so a DATABASE_URL or SMTP_* in the caller's environment cannot
// point a worker elsewhere.
func (r *run) workerEnv() []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + r.dbURL,
		"APP_ENV=test",
		"LOG_LEVEL=warn",
		"SMTP_HOST=127.0.0.1", "SMTP_PORT=" + strconv.Itoa(r.sink.Port()), "SMTP_TLS=none",
		"SMTP_FROM=soak@postbox.test",
		"WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8",
		"POLL_INTERVAL=200ms",
		"SHUTDOWN_TIMEOUT=" + workerStopTTL,
		"RETRY_BACKOFF_SCALE=" + backoffScale,
		"EMAIL_BATCH_SIZE=1", "EMAIL_BATCH_TIMEOUT=" + batchTimeout, "LEASE_SLACK=" + leaseSlack,
		"WEBHOOK_BIRTH_LEASE=" + birthLease, "WEBHOOK_RETRY_BATCH=1",
	}
	if tmp := os.Getenv("TMPDIR"); tmp != "" {
		env = append(env, "TMPDIR="+tmp)
	}
	return append(env, r.opts.Env...)
}

// chaos kills a random worker every KillEveryMin–KillEveryMax and restarts
// Postgres once, until Chaos has passed.
func (r *run) chaos(ctx context.Context) error {
	nextKill := r.chaosStart.Add(r.killGap())
	var restartAt time.Time
	if r.opts.PGRestartAt >= 0 {
		restartAt = r.chaosStart.Add(time.Duration(float64(r.opts.Chaos) * r.opts.PGRestartAt))
	}
	nextStatus := r.chaosStart.Add(5 * time.Second)
	for {
		next := r.chaosEnd
		for _, t := range []time.Time{nextKill, restartAt, nextStatus} {
			if !t.IsZero() && t.Before(next) {
				next = t
			}
		}
		if err := sleepUntil(ctx, next); err != nil {
			return fmt.Errorf("soak: during chaos: %w", err)
		}
		now := time.Now()
		if !now.Before(r.chaosEnd) {
			return nil
		}
		if !restartAt.IsZero() && !now.Before(restartAt) {
			restartAt = time.Time{}
			r.restartPostgres(ctx)
		}
		if !now.Before(nextKill) {
			// Every other kill is the River leader's: delivery must not
			// depend on it.
			slot, leader := r.rng.IntN(r.opts.Workers), false
			if r.kills()%2 == 1 {
				if s := r.leaderSlot(ctx); s >= 0 {
					slot, leader = s, true
				}
			}
			c, err := r.fleet.kill(slot)
			if err != nil {
				return fmt.Errorf("soak: %w", err)
			}
			state := "running"
			if !c.Running {
				state = "still booting"
			}
			if leader {
				state += ", the River leader"
				r.leaderKills++
			}
			r.logf("kill -9 worker slot %d pid %d, %s (kill #%d)", slot, c.PID, state, r.kills())
			// From the planned time, not from now: a restart or a slow
			// kill must not thin out the schedule.
			nextKill = nextKill.Add(r.killGap())
		}
		if !now.Before(nextStatus) {
			r.status(ctx)
			nextStatus = now.Add(5 * time.Second)
		}
	}
}

// leaderSlot is the fleet slot of the River leader (client ID host-pid),
// or -1 when there is none or it is not one of ours.
func (r *run) leaderSlot(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var id string
	if err := r.pool.QueryRow(ctx, `SELECT leader_id FROM river_leader`).Scan(&id); err != nil {
		return -1
	}
	pid := clientPID(id)
	if pid < 0 {
		return -1
	}
	return r.fleet.slotOf(pid)
}

func (r *run) killGap() time.Duration {
	lo, hi := r.opts.KillEveryMin, r.opts.KillEveryMax
	if hi == lo {
		return lo
	}
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1))
}

func (r *run) restartPostgres(ctx context.Context) {
	r.logf("restarting Postgres (pg_ctl restart -m fast)")
	rs := &Restart{Start: time.Now()}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.cluster.Restart(rctx); err != nil {
		rs.Err = err.Error()
		r.logf("Postgres restart failed: %v", err)
	}
	rs.End = time.Now()
	r.restart = rs
	r.logf("Postgres back after %s", rs.End.Sub(rs.Start).Round(10*time.Millisecond))
}

// quiet waits, with no more kills, until every row is terminal or ctx
// ends. It reports whether every row got there.
func (r *run) quiet(ctx context.Context) bool {
	nextStatus := time.Now().Add(5 * time.Second)
	for {
		c, err := r.counts(ctx)
		if err == nil && c.pendingTotal() == 0 && r.load.done() {
			r.logf("every row is terminal")
			return true
		}
		if time.Now().After(nextStatus) {
			r.status(ctx)
			nextStatus = time.Now().Add(5 * time.Second)
		}
		if sleepUntil(ctx, time.Now().Add(250*time.Millisecond)) != nil {
			return false
		}
	}
}

// counts are the rows per state, as the workers see them.
type counts struct {
	Email, Outbox, Deliveries map[string]int
}

func (c counts) pendingTotal() int {
	return c.Email["pending"] + c.Outbox["pending"] + c.Deliveries["pending"]
}

func (r *run) counts(ctx context.Context) (counts, error) {
	c := counts{Email: map[string]int{}, Outbox: map[string]int{}, Deliveries: map[string]int{}}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := r.pool.Query(qctx, `SELECT 'email', status, count(*) FROM email_outbox GROUP BY status
UNION ALL SELECT 'outbox', status, count(*) FROM webhook_outbox GROUP BY status
UNION ALL SELECT 'deliveries', status, count(*) FROM webhook_deliveries GROUP BY status`)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var table, status string
		var n int
		if err := rows.Scan(&table, &status, &n); err != nil {
			return c, err
		}
		map[string]map[string]int{"email": c.Email, "outbox": c.Outbox, "deliveries": c.Deliveries}[table][status] = n
	}
	return c, rows.Err()
}

func (r *run) status(ctx context.Context) {
	c, err := r.counts(ctx)
	if err != nil {
		r.logf("status: database unavailable (%v)", firstLine(err.Error()))
		return
	}
	r.logf("emails %d/%d sent, %d pending, %d failed | events %d/%d fanned out | deliveries %d ok, %d pending | sink %d | crashes %d",
		c.Email["dispatched"], r.load.emailsEnqueued(), c.Email["pending"], c.Email["failed"],
		c.Outbox["dispatched"], r.load.eventsEnqueued(), c.Deliveries["succeeded"], c.Deliveries["pending"],
		r.sink.Len(), len(r.crashes()))
	var river []string
	if gap, _, _ := r.stuck.leaderGap(); gap > 0 {
		river = append(river, fmt.Sprintf("no live leader for %s (no new retry passes)", gap.Round(time.Second)))
	}
	if stuck := r.stuck.current(); len(stuck) > 0 {
		river = append(river, fmt.Sprintf("%d jobs still running on dead workers", len(stuck)))
	}
	if len(river) > 0 {
		r.logf("  River: %s", strings.Join(river, "; "))
	}
}

func (r *run) crashes() []Crash {
	c, _ := r.fleet.snapshot()
	return c
}

func (r *run) kills() int {
	n := 0
	for _, c := range r.crashes() {
		if c.Killed {
			n++
		}
	}
	return n
}

// close releases everything Run started, whatever state it is in.
func (r *run) close() {
	if r.fleet != nil {
		r.fleet.stop(5 * time.Second)
	}
	for _, rc := range r.receivers {
		rc.close()
	}
	if r.sink != nil {
		_ = r.sink.Close()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if r.cluster != nil {
		if err := r.cluster.Stop(); err != nil {
			r.logf("stop throwaway Postgres: %v", err)
		}
	}
	if r.ownsLogDir {
		_ = os.RemoveAll(r.logDir)
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
