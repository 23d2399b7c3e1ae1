package bench

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/tooling/pgbouncer"
	"github.com/postbox/postbox/webhook"
)

// The pool-pgbouncer section's backlog beside its N emails, and the
// pooler's size.
const (
	// pgbEndpoints receive every event: N/5 events make 2N/5 deliveries.
	pgbEndpoints = 2
	// pgbServerConns is PgBouncer's own default default_pool_size: what a
	// stock install gives the replicas' pools to share.
	pgbServerConns = 20
)

// pgbPath is one way the replicas reach the database.
type pgbPath struct {
	name    string
	bouncer bool // DATABASE_URL through PgBouncer, DATABASE_POOL_MODE=transaction
	listen  bool // with DATABASE_DIRECT_URL: wake-ups by LISTEN; else by polling
	// describe is the direct path in the exec mode transaction mode
	// uses, without the pooler: what of the difference is the exec mode's.
	describe bool
}

var pgbPaths = []pgbPath{
	{name: "direct, session"},
	{name: "PgBouncer transaction, LISTEN on DATABASE_DIRECT_URL", bouncer: true, listen: true},
	{name: "PgBouncer transaction, polling", bouncer: true},
	{name: "direct, session, cache_describe", describe: true},
}

// pgbouncerSection drains one backlog of emails and webhook events with R
// `worker run` processes, the same settings on every path, directly and
// through PgBouncer in transaction mode (with and without the direct URL),
// the paths alternating from trial to trial; it reports msg/s from the
// first exec to the last first delivery, the ratio of each PgBouncer path
// to direct, and the machine's CPU per message, and fails on a message
// lost or delivered twice.
func (pr *poolRunner) pgbouncerSection(ctx context.Context) error {
	bin, err := pgbouncer.Find()
	if err != nil {
		return fmt.Errorf("pool-pgbouncer: %w", err)
	}
	dir := filepath.Join(pr.tmp, "pgbouncer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Bin: bin, Dir: dir, Upstream: pr.url, DefaultPoolSize: pgbServerConns, MaxClientConn: 500})
	if err != nil {
		return fmt.Errorf("pool-pgbouncer: %w", err)
	}
	defer b.Close()
	pooled, err := b.URL(pr.url)
	if err != nil {
		return err
	}
	pr.logf("pool pgbouncer: PgBouncer (%s) in transaction mode on port %d, default_pool_size %d", bin, b.Port, pgbServerConns)

	type key struct {
		replicas int
		path     string
	}
	rate, cpu := map[key][]float64{}, map[key][]float64{}
	err = pr.trials(ctx, pr.po.Replicas, func(ctx context.Context, t, rc int) error {
		for _, p := range rotate(pgbPaths, t) {
			r, c, err := pr.pgbouncerRun(ctx, p, rc, b, pooled)
			if err != nil {
				return err
			}
			k := key{rc, p.name}
			rate[k], cpu[k] = append(rate[k], r), append(cpu[k], c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, rc := range pr.po.Replicas {
		direct := key{rc, pgbPaths[0].name}
		for _, p := range pgbPaths[1:] {
			k := key{rc, p.name}
			var each []string
			for t := range rate[k] {
				each = append(each, fmt.Sprintf("%.2f", rate[k][t]/rate[direct][t]))
			}
			ratio := median(rate[k]) / median(rate[direct])
			aim := "what the exec mode alone costs"
			if p.bouncer {
				aim = "0.8× is the aim"
			}
			pr.add(Row{Section: titlePoolPgBouncer, Path: rp(rc) + "ratio " + p.name + " / direct", Figure: fmt.Sprintf("%.2f", ratio), Unit: "×", Value: ratio,
				Notes: fmt.Sprintf("msg/s from start, medians; per trial %s; machine CPU per message %.2f ms against %.2f ms direct (medians); %s",
					strings.Join(each, ", "), median(cpu[k]), median(cpu[direct]), aim)})
		}
	}
	return nil
}

// pgbouncerRun inserts N emails and N/5 events (to pgbEndpoints
// receivers), starts rc processes on path p and times them until every
// email and delivery arrived. It returns msg/s from the first exec and the
// machine's CPU per message (ms).
func (pr *poolRunner) pgbouncerRun(ctx context.Context, p pgbPath, rc int, b *pgbouncer.Bouncer, pooled string) (float64, float64, error) {
	n, events := pr.po.N, max(pr.po.N/5, 1)
	deliveries := events * pgbEndpoints
	label := rp(rc) + p.name
	if err := pr.truncate(ctx); err != nil {
		return 0, 0, err
	}
	hooks := startReceivers(pgbEndpoints)
	defer hooks.close()
	cidrs := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, s := range hooks.servers {
		if _, err := webhook.CreateEndpoint(ctx, pr.ctl, cidrs, webhook.EndpointParams{URL: s.URL}); err != nil {
			return 0, 0, fmt.Errorf("pool pgbouncer: create endpoint: %w", err)
		}
	}
	pr.logf("pool pgbouncer: %s: inserting %d emails and %d events for %d endpoints", label, n, events, pgbEndpoints)
	ids, _, err := pr.insertBacklog(ctx, pathPostbox, n)
	if err != nil {
		return 0, 0, fmt.Errorf("pool pgbouncer %s: %w", label, err)
	}
	if _, err := pr.ctl.Exec(ctx, `INSERT INTO webhook_outbox (event_type, payload)
SELECT 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i, 'amount_due', 12000, 'currency', 'eur') FROM generate_series(1, $1) AS i`, events); err != nil {
		return 0, 0, fmt.Errorf("pool pgbouncer %s: %w", label, err)
	}
	if err := pr.settle(ctx, pr.ctl, "email_outbox", "webhook_outbox", "webhook_endpoints"); err != nil {
		return 0, 0, err
	}
	rs, err := pr.relays(rc)
	if err != nil {
		return 0, 0, err
	}
	defer rs.close()

	env := []string{"WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8"}
	if p.describe {
		env = append(env, "DATABASE_URL="+withParam(pr.url, "default_query_exec_mode", "cache_describe"))
	}
	if p.bouncer {
		env = append(env, "DATABASE_URL="+pooled, "DATABASE_POOL_MODE=transaction")
		if p.listen {
			env = append(env, "DATABASE_DIRECT_URL="+pr.url)
		}
	}
	watch := b.WatchPeaks(ctx, 100*time.Millisecond, func(pl pgbouncer.Pool) bool { return pl.Database != "pgbouncer" })
	defer watch()

	pr.logf("pool pgbouncer: %s: starting %d process(es)", label, rc)
	busy := machineBusy()
	procs, started, err := pr.start(ctx, path{name: p.name, env: env}, rs, rc, "pgbouncer "+label)
	if err != nil {
		return 0, 0, fmt.Errorf("pool pgbouncer %s: %w", label, err)
	}
	defer pr.stop(procs)
	var done time.Time
	deadline := time.Now().Add(backlogLimit)
	nextLog := time.Now().Add(5 * time.Second)
	for {
		emails := rs.tally(ids).received
		_, hooked := hooks.counts()
		if emails == n && hooked == deliveries {
			done = time.Now()
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, checkf("pool pgbouncer %s: %d of %d emails and %d of %d deliveries arrived within %s", label, emails, n, hooked, deliveries, backlogLimit)
		}
		if time.Now().After(nextLog) {
			pr.logf("pool pgbouncer: %s: %d of %d emails, %d of %d deliveries", label, emails, n, hooked, deliveries)
			nextLog = time.Now().Add(5 * time.Second)
			for _, pc := range procs {
				if !pc.alive() {
					return 0, 0, fmt.Errorf("pool pgbouncer %s: %s exited (%v)\n%s", label, pc.name, pc.waitErr, pc.tail())
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	msgs := n + deliveries
	cpuMS := float64((machineBusy() - busy).Microseconds()) / 1000 / float64(msgs)
	peaks := watch()
	time.Sleep(500 * time.Millisecond) // a duplicate sent just after the last first arrival still counts
	t := rs.tally(ids)
	total, distinct := hooks.counts()
	if t.dups != 0 || total != distinct {
		return 0, 0, checkf("pool pgbouncer %s: %d email and %d webhook duplicates", label, t.dups, total-distinct)
	}
	elapsed := done.Sub(started)
	rate := perSecond(msgs, elapsed)
	notes := fmt.Sprintf("%d emails + %d deliveries (%d events × %d endpoints) in %.2f s from the first exec; 0 lost, 0 duplicates; machine CPU %.2f ms per message; EMAIL_CONCURRENCY=%d per process; %s",
		n, deliveries, events, pgbEndpoints, elapsed.Seconds(), cpuMS, pr.po.Concurrency, pr.po.relayNote(rc, perSecond(n, elapsed), perSecond(n, elapsed)))
	if p.bouncer {
		notes += fmt.Sprintf("; PgBouncer's busiest moment: %d of %d server connections active, %d clients waiting", peaks.ServersActive, pgbServerConns, peaks.ClientsWaiting)
	}
	pr.add(Row{Section: titlePoolPgBouncer, Path: label, Figure: fmtRate(rate), Unit: "msg/s from start", Value: rate, Notes: notes})
	return rate, cpuMS, nil
}

// withParam is a postgres:// URL with one query parameter set.
func withParam(raw, key, value string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
