package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/webhook"
)

// The pool-webhook-isolation section: the tenants' isolation
// (docs/design/outbox-transport.md, Tenants) as a bench check, beside
// the test (webhook/tenant_isolation_test.go) that holds it with
// in-process dispatchers. isoTenants tenants with two proven
// endpoints each; IsolationEvents events, each for a tenant drawn at
// random, by plain SQL and webhook.EnqueueEvent, some addressed to one of
// their tenant's endpoints, some ordered, enqueued while isoReplicas
// `worker run` processes run; the River leader among them is killed with
// SIGKILL once a share of the deliveries arrived, and the survivor
// finishes. Some endpoints refuse each delivery's first request (retries);
// the first endpoint of some tenants refuses everything until the
// deliveries to it failed for good, then answers, and those are brought
// back by a recover-since of the tenant (webhook.TenantScope.RecoverSince
// and `worker replay tenant`) or requeued (webhook.RequeueDelivery of what
// the tenant's scope lists as failed); and some events are replayed through
// their tenant's scope (TenantScope.ReplayEvent), each first refused
// through another tenant's. Every request the receiver got is checked
// against the tenant the bench enqueued its event (or its replay's
// original) for: one to an endpoint of another tenant fails the run, and
// so does an event or clone that did not reach an endpoint it should.
const (
	isoTenants  = 1000
	isoReplicas = 2
	// isoKillShare is the share of the events' two-endpoint deliveries
	// that arrived when the leader is killed.
	isoKillShare = 0.3
	// isoBackoffScale is RETRY_BACKOFF_SCALE: the eight attempts of a
	// delivery that is always refused end in about 10 s.
	isoBackoffScale = 0.0001
	// Tenants n with n%isoDownEvery == isoRecoverAt (recovered since) or
	// isoRequeueAt (requeued) have a first endpoint that refuses every
	// request until the recovery; tenants with n%isoFlakyEvery == 1 have
	// both endpoints refuse each delivery's first request.
	isoDownEvery  = 50
	isoRecoverAt  = 3
	isoRequeueAt  = 7
	isoFlakyEvery = 10
	// Every isoAddressedEvery-th event is addressed to one of its tenant's
	// endpoints, every isoOrderedEvery-th ordered by one of isoKeys keys
	// (the same keys for every tenant).
	isoAddressedEvery = 7
	isoOrderedEvery   = 5
	isoKeys           = 4
	// isoReplays events are replayed through their tenant's scope;
	// isoMisaddressed are addressed to another tenant's endpoint by plain
	// SQL, and as many refused by EnqueueEvent.
	isoReplays      = 50
	isoMisaddressed = 10
	isoChunk        = 500 // events per plain-SQL statement
	isoOperator     = "postbox-bench-operator"
)

// isoLedger is what the bench enqueued: the truth each request is checked
// against.
type isoLedger struct {
	order        []string          // events in enqueue order
	tenantOf     map[string]int    // event (and misaddressed row) id → tenant index
	addressed    map[string]int    // addressed event → endpoint index
	misaddressed []string          // plain-SQL rows addressed to another tenant's endpoint
	refusedGo    int               // EnqueueEvent refusals of misaddressed events
	replayOf     map[string]string // ReplayEvent clone → original
	viaGo        int
}

// want is where event id (an original) must go: its addressed endpoint,
// or both endpoints of its tenant.
func (l *isoLedger) want(id string) []int {
	if e, ok := l.addressed[id]; ok {
		return []int{e}
	}
	n := l.tenantOf[id]
	return []int{n * hookTenantsEndpoints, n*hookTenantsEndpoints + 1}
}

func isoTenant(n int) string { return "t" + strconv.Itoa(n) }

func isoRecovered(n int) bool { return n%isoDownEvery == isoRecoverAt }
func isoRequeued(n int) bool  { return n%isoDownEvery == isoRequeueAt }

// isoDown is whether endpoint e refuses everything until healed.
func isoDown(e int) bool {
	n := e / hookTenantsEndpoints
	return e%hookTenantsEndpoints == 0 && (isoRecovered(n) || isoRequeued(n))
}

// webhookIsolationSection runs the section once, at IsolationEvents
// events; a crossed, unknown, stray or missing delivery fails it.
func (pr *poolRunner) webhookIsolationSection(ctx context.Context) error {
	events := pr.po.IsolationEvents
	label := fmt.Sprintf("%s%s tenants × %d endpoints, %s events, kill -9 of one", rp(isoReplicas), fmtCount(isoTenants), hookTenantsEndpoints, fmtCount(events))
	if err := pr.truncate(ctx); err != nil {
		return err
	}
	var healed atomic.Bool
	hooks := startReceiversWith(1, receiverOptions{byPath: true, refuse: func(k hookKey, nth int) bool {
		return (isoDown(k.endpoint) && !healed.Load()) || (nth == 1 && (k.endpoint/hookTenantsEndpoints)%isoFlakyEvery == 1)
	}})
	defer hooks.close()
	if _, err := pr.ctl.Exec(ctx, tenantEndpointsSQL, isoTenants, hooks.servers[0].URL, hookTenantsEndpoints); err != nil {
		return fmt.Errorf("%s: endpoints: %w", label, err)
	}
	eps, err := pr.endpointsByPath(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	for e := range eps {
		// As in the test: a failed ordered delivery would hold its key,
		// and with it the recovery's replays of the key.
		if isoDown(e) {
			if err := webhook.SetOrderOnFailure(ctx, pr.ctl, eps[e], webhook.OrderProceed); err != nil {
				return err
			}
		}
	}
	if err := pr.settle(ctx, pr.ctl, "webhook_endpoints"); err != nil {
		return err
	}
	env := append([]string{"RETRY_BACKOFF_SCALE=" + strconv.FormatFloat(isoBackoffScale, 'g', -1, 64)}, pr.po.BreakerOff...)
	procs, started, stop, err := pr.startHooks(ctx, pathPostbox, isoReplicas, pr.po.WebhookConcurrency, "webhook "+label, env...)
	if err != nil {
		return err
	}
	defer stop()

	// The load, while the replicas run; the kill once a share arrived.
	pr.logf("pool webhook isolation: %s: enqueueing", label)
	type enqueued struct {
		l   *isoLedger
		err error
	}
	done := make(chan enqueued, 1)
	go func() {
		l, err := pr.isoEnqueue(ctx, events, eps)
		done <- enqueued{l, err}
	}()
	killAt := int(isoKillShare * float64(events*hookTenantsEndpoints))
	if _, err := pr.waitHooks(ctx, hooks, killAt, backlogLimit, "pool webhook isolation: before the kill", procs); err != nil {
		return err
	}
	conn, err := pr.ctl.Acquire(ctx)
	if err != nil {
		return err
	}
	dead, err := leader(ctx, conn.Conn(), procs, 30*time.Second)
	conn.Release()
	if err != nil {
		return err
	}
	killedAt := time.Now()
	_, atKill := hooks.counts()
	dead.kill9()
	var alive []*proc
	for _, p := range procs {
		if p != dead {
			alive = append(alive, p)
		}
	}
	enq := <-done
	if enq.err != nil {
		return fmt.Errorf("%s: enqueue: %w", label, enq.err)
	}
	l := enq.l
	pr.logf("pool webhook isolation: killed %s (the River leader) at +%.1f s after %d deliveries; the survivor finishes (up to %s for the dead replica's leases)",
		dead.name, killedAt.Sub(started).Seconds(), atKill, killSettle())
	firstDone, err := pr.waitNothingPending(ctx, backlogLimit+killSettle(), "pool webhook isolation: first round", alive)
	if err != nil {
		return err
	}
	var failed, failedDown int
	if err := pr.ctl.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE endpoint_id = ANY($1::uuid[])) FROM webhook_deliveries WHERE status = 'failed'`,
		downIDs(eps)).Scan(&failed, &failedDown); err != nil {
		return err
	}

	// Bring back what failed for good, and replay some events.
	healed.Store(true)
	d, err := webhook.NewDispatcher(pr.ctl, webhook.Config{
		Settings: webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, UserAgent: isoOperator,
			Concurrency: pr.po.WebhookConcurrency, BreakerMinRequests: 1_000_000},
		Backoff: webhook.DefaultBackoff.Scaled(isoBackoffScale), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer d.Close()
	since := started.Add(-time.Minute)
	requeued, err := pr.isoRecover(ctx, d, since, env)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	refusedScope, err := isoReplay(ctx, d, l)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	lastDone, err := pr.waitNothingPending(ctx, backlogLimit, "pool webhook isolation: recovered, requeued and replayed", alive)
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // a request sent just after its delivery was marked still counts

	// Every request, against the ledger.
	rootOf, err := pr.isoClones(ctx)
	if err != nil {
		return err
	}
	c, err := isoCheck(l, hooks.log(), rootOf)
	if err != nil {
		return err
	}
	var badRows int
	if err := pr.ctl.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox o WHERE o.id = ANY($1::uuid[])
		AND (o.status <> 'failed' OR EXISTS (SELECT 1 FROM webhook_events e WHERE e.id = o.id))`, l.misaddressed).Scan(&badRows); err != nil {
		return err
	}
	switch {
	case c.crossed > 0 || c.unknown > 0:
		return checkf("%s: %d requests to an endpoint of another tenant than their event's, %d of events the bench did not enqueue", label, c.crossed, c.unknown)
	case c.missing > 0 || c.stray > 0:
		return checkf("%s: %d deliveries never arrived, %d reached an endpoint of the tenant their event was not addressed to", label, c.missing, c.stray)
	case c.dups > pr.po.WebhookConcurrency:
		return checkf("%s: %d duplicates, more than the dead replica's %d requests in flight", label, c.dups, pr.po.WebhookConcurrency)
	case failed == 0 || failed != failedDown || requeued == 0 || c.recovered == 0:
		return checkf("%s: %d deliveries failed for good (%d to the refusing endpoints), %d requeued, %d recovered: the run did not exercise recovery as meant", label, failed, failedDown, requeued, c.recovered)
	case refusedScope != isoReplays || len(c.replays) != isoReplays:
		return checkf("%s: %d of %d replays through another tenant's scope refused, %d replayed", label, refusedScope, isoReplays, len(c.replays))
	case l.refusedGo != isoMisaddressed || badRows > 0:
		return checkf("%s: %d of %d misaddressed EnqueueEvent calls refused; %d misaddressed plain-SQL rows not failed or made an event", label, l.refusedGo, isoMisaddressed, badRows)
	}

	// Deliveries after the survivor's ordinary pace waited for the dead
	// replica's leases; a repeat is one the dead replica had sent before
	// it died, unmarked.
	stranded, repeats := 0, 0
	seen := map[hookKey]bool{}
	for _, h := range c.hits { // in order of arrival
		if h.status >= 300 {
			continue
		}
		if h.at.After(killedAt.Add(killQuickSettle)) && !h.at.After(firstDone) {
			stranded++
			if seen[h.key] {
				repeats++
			}
		}
		seen[h.key] = true
	}
	shares, _ := fmtShares(perReplica(c.hits, isoReplicas)[:isoReplicas])
	pr.add(Row{Section: titlePoolWebhookIsolation, Path: label + ": requests to another tenant's endpoint", Figure: "0", Unit: "requests", Value: 0,
		Notes: fmt.Sprintf("%s: the aim is 0; %d requests checked (%d answered 500 on purpose), each against the tenant the bench enqueued its event, or its replay's original, for; 0 of events the bench did not enqueue; 0 to an endpoint of the tenant its event was not addressed to",
			verdict(true), len(c.hits), c.refused)})
	pr.add(Row{Section: titlePoolWebhookIsolation, Path: label + ": deliveries", Figure: fmt.Sprintf("%d / 0", c.delivered), Unit: "delivered / missing", Value: float64(c.delivered),
		Notes: fmt.Sprintf("%s: the aim is every event at each endpoint it should reach (2 a broadcast, 1 an addressed event); %s events (%d by webhook.EnqueueEvent, the rest by plain SQL; every %dth addressed, every %dth ordered by one of %d keys); %d failed for good, all to the %d refusing endpoints; %d recovered since (webhook.TenantScope.RecoverSince and `worker replay tenant --since`), %d requeued (webhook.RequeueDelivery of the tenant scope's failed list); %d replays through the tenant's scope, each refused through another tenant's first; %d misaddressed by plain SQL failed unsent, %d refused by EnqueueEvent; %d duplicates (≤ WEBHOOK_CONCURRENCY=%d in flight at the kill allowed); per replica %s, %d by the operator's replays (their first attempts, by the bench's dispatcher and `worker replay tenant`)",
			verdict(true), fmtCount(len(l.order)), l.viaGo, isoAddressedEvery, isoOrderedEvery, isoKeys, failed, len(downIDs(eps)), c.recovered, requeued, len(c.replays), len(l.misaddressed), l.refusedGo,
			c.dups, pr.po.WebhookConcurrency, shares, perReplica(c.hits, isoReplicas)[isoReplicas])})
	pr.add(Row{Section: titlePoolWebhookIsolation, Path: label + ": kill -9", Figure: fmt.Sprintf("+%.1f", killedAt.Sub(started).Seconds()), Unit: "s from start", Value: killedAt.Sub(started).Seconds(),
		Notes: fmt.Sprintf("%s (the River leader) killed after %d of the deliveries had arrived; the survivor had nothing pending at +%.1f s — %d deliveries came more than %s after the kill, held by the dead replica's leases (WEBHOOK_BIRTH_LEASE, %s by default; the bound was %s), %d of them again after the dead replica had sent them unmarked — and after the recovery, requeues and replays at +%.1f s; RETRY_BACKOFF_SCALE=%g, breaker off (%s), WEBHOOK_CONCURRENCY=%d",
			dead.name, atKill, firstDone.Sub(started).Seconds(), stranded, killQuickSettle, leases.BirthLeaseWindow, killSettle(), repeats, lastDone.Sub(started).Seconds(), isoBackoffScale, strings.Join(pr.po.BreakerOff, " "), pr.po.WebhookConcurrency)})
	return nil
}

// endpointsByPath returns the endpoints' ids by the index of their
// receiver path /e/<i>.
func (pr *poolRunner) endpointsByPath(ctx context.Context) ([]string, error) {
	rows, err := pr.ctl.Query(ctx, `SELECT id::text, url FROM webhook_endpoints`)
	if err != nil {
		return nil, err
	}
	var id, url string
	byIndex := map[int]string{}
	if _, err := pgx.ForEachRow(rows, []any{&id, &url}, func() error {
		_, tail, _ := strings.Cut(url, "/e/")
		i, err := strconv.Atoi(tail)
		byIndex[i] = id
		return err
	}); err != nil {
		return nil, fmt.Errorf("endpoints: %w", err)
	}
	eps := make([]string, len(byIndex))
	for i, id := range byIndex {
		if i < 0 || i >= len(eps) {
			return nil, fmt.Errorf("endpoint path /e/%d out of range", i)
		}
		eps[i] = id
	}
	return eps, nil
}

func downIDs(eps []string) []string {
	var ids []string
	for e, id := range eps {
		if isoDown(e) {
			ids = append(ids, id)
		}
	}
	return ids
}

// isoEnqueueSQL writes a chunk of planned events by plain SQL; seq is
// the event's place in the plan.
const isoEnqueueSQL = `INSERT INTO webhook_outbox (tenant_id, event_type, payload, ordering_key, endpoint_id)
SELECT 't' || n, 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || seq, 'seq', seq, 'amount_due', 12000, 'currency', 'eur'), NULLIF(k, ''), NULLIF(e, '')::uuid
FROM unnest($1::int[], $2::text[], $3::text[], $4::int[]) AS u(n, k, e, seq) RETURNING id::text, (payload->>'seq')::int`

// isoPlanned is one event of the plan.
type isoPlanned struct {
	tenant int
	key    string
	to     int // endpoint index; -1: both of the tenant's
}

// isoEnqueue writes n events, each for a tenant drawn at random, in
// chunks: every hookEnqueueShare-th through webhook.EnqueueEvent in its
// own transaction, the rest of a chunk by one plain-SQL statement. Then
// the misaddressed ones.
func (pr *poolRunner) isoEnqueue(ctx context.Context, n int, eps []string) (*isoLedger, error) {
	rng := rand.New(rand.NewPCG(42, 0x69736f))
	l := &isoLedger{tenantOf: make(map[string]int, n), addressed: map[string]int{}, replayOf: map[string]string{}}
	record := func(id string, ev isoPlanned) {
		l.order = append(l.order, id)
		l.tenantOf[id] = ev.tenant
		if ev.to >= 0 {
			l.addressed[id] = ev.to
		}
	}
	endpointID := func(to int) string {
		if to < 0 {
			return ""
		}
		return eps[to]
	}
	for start := 0; start < n; start += isoChunk {
		plan := map[int]isoPlanned{}
		var tenants, seqs []int
		var keys, tos []string
		for i := start; i < min(start+isoChunk, n); i++ {
			ev := isoPlanned{tenant: rng.IntN(isoTenants), to: -1}
			if i%isoOrderedEvery == 0 {
				ev.key = "cus_" + strconv.Itoa(i/isoOrderedEvery%isoKeys)
			}
			if i%isoAddressedEvery == 0 {
				ev.to = ev.tenant*hookTenantsEndpoints + i/isoAddressedEvery%hookTenantsEndpoints
			}
			if i%hookEnqueueShare != 0 {
				plan[i] = ev
				tenants, keys, tos, seqs = append(tenants, ev.tenant), append(keys, ev.key), append(tos, endpointID(ev.to)), append(seqs, i)
				continue
			}
			id, err := pr.enqueueEvent(ctx, webhook.Event{Tenant: isoTenant(ev.tenant), Type: "invoice.paid", OrderingKey: ev.key, EndpointID: endpointID(ev.to),
				Payload: fmt.Appendf(nil, `{"invoice_id":"in_go_%d","amount_due":12000,"currency":"eur"}`, i)})
			if err != nil {
				return nil, fmt.Errorf("event %d: %w", i, err)
			}
			record(id, ev)
			l.viaGo++
		}
		rows, err := pr.ctl.Query(ctx, isoEnqueueSQL, tenants, keys, tos, seqs)
		if err != nil {
			return nil, err
		}
		var id string
		var seq int
		if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error { record(id, plan[seq]); return nil }); err != nil {
			return nil, err
		}
	}
	for i := range isoMisaddressed {
		own, other := i*97%isoTenants, (i*97+1)%isoTenants
		var id string
		if err := pr.ctl.QueryRow(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload, endpoint_id) VALUES ($1, 'invoice.paid', '{}', $2) RETURNING id::text`,
			isoTenant(own), eps[other*hookTenantsEndpoints]).Scan(&id); err != nil {
			return nil, err
		}
		l.misaddressed = append(l.misaddressed, id)
		l.tenantOf[id] = own
		_, err := pr.enqueueEvent(ctx, webhook.Event{Tenant: isoTenant(own), Type: "invoice.paid", Payload: []byte(`{}`), EndpointID: eps[other*hookTenantsEndpoints]})
		switch {
		case errors.Is(err, webhook.ErrInvalidEvent):
			l.refusedGo++
		case err != nil:
			return nil, err
		}
	}
	return l, nil
}

// isoRecover brings back what failed for good: the recovered tenants by
// a recover-since, every other one through the Go API, the rest by
// `worker replay tenant --since`; the requeued tenants' failed deliveries,
// listed through their scope, by RequeueDelivery. It returns how many
// were requeued.
func (pr *poolRunner) isoRecover(ctx context.Context, d *webhook.Dispatcher, since time.Time, env []string) (int, error) {
	requeued, k := 0, 0
	for n := range isoTenants {
		switch {
		case isoRecovered(n) && k%2 == 0:
			k++
			scope, err := webhook.ForTenant(isoTenant(n))
			if err != nil {
				return 0, err
			}
			if _, err := scope.RecoverSince(ctx, d, since); err != nil {
				return 0, fmt.Errorf("recover %s: %w", isoTenant(n), err)
			}
		case isoRecovered(n):
			k++
			cmd := exec.CommandContext(ctx, pr.bins.worker, "replay", "tenant", isoTenant(n), "--since", since.UTC().Format(time.RFC3339Nano))
			cmd.Env = append(baseEnv(), append([]string{"DATABASE_URL=" + pr.url, "APP_ENV=development", "LOG_LEVEL=warn",
				"WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8", "WEBHOOK_USER_AGENT=" + isoOperator}, env...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return 0, fmt.Errorf("worker replay tenant %s: %w\n%s", isoTenant(n), err, out)
			}
		case isoRequeued(n):
			scope, err := webhook.ForTenant(isoTenant(n))
			if err != nil {
				return 0, err
			}
			ds, err := scope.ListDeliveries(ctx, pr.ctl, webhook.DeliveryQuery{Status: webhook.StatusFailed, Limit: 1000})
			if err != nil {
				return 0, err
			}
			for _, dl := range ds {
				if dl.Tenant != isoTenant(n) {
					return 0, checkf("tenant %s's scope listed delivery %s of tenant %q", isoTenant(n), dl.ID, dl.Tenant)
				}
				if err := webhook.RequeueDelivery(ctx, pr.ctl, dl.ID, isoOperator); err != nil {
					return 0, err
				}
				requeued++
			}
		}
	}
	return requeued, nil
}

// isoReplay replays isoReplays events spread over the enqueue order
// through their tenant's scope, each first tried through the next
// tenant's scope, which must answer ErrNotFound. It returns how many
// were refused so.
func isoReplay(ctx context.Context, d *webhook.Dispatcher, l *isoLedger) (int, error) {
	refused := 0
	for i := range isoReplays {
		id := l.order[i*len(l.order)/isoReplays]
		n := l.tenantOf[id]
		other, err := webhook.ForTenant(isoTenant((n + 1) % isoTenants))
		if err != nil {
			return 0, err
		}
		if _, err := other.ReplayEvent(ctx, d, id); errors.Is(err, webhook.ErrNotFound) {
			refused++
		} else if err != nil {
			return 0, err
		}
		own, err := webhook.ForTenant(isoTenant(n))
		if err != nil {
			return 0, err
		}
		rep, err := own.ReplayEvent(ctx, d, id)
		if err != nil {
			return 0, fmt.Errorf("replay %s: %w", id, err)
		}
		l.replayOf[rep.EventID] = id
	}
	return refused, nil
}

// isoChecked is what isoCheck found.
type isoChecked struct {
	hits      []hit
	crossed   int // requests to an endpoint of another tenant
	unknown   int // requests of events the bench did not enqueue (nor clone)
	stray     int // successes at an endpoint of their event's tenant it was not addressed to
	missing   int // event (or clone) × endpoint it should reach, never delivered
	dups      int // successes beyond the first of a delivery
	refused   int // requests answered 500 on purpose
	delivered int // distinct successful deliveries
	recovered int // recovery clones (not the section's own replays)
	replays   map[string]string
}

// isoClones reads every clone's original from webhook_events.replay_of.
func (pr *poolRunner) isoClones(ctx context.Context) (map[string]string, error) {
	rows, err := pr.ctl.Query(ctx, `SELECT id::text, replay_of::text FROM webhook_events WHERE replay_of IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	var clone, orig string
	rootOf := map[string]string{}
	_, err = pgx.ForEachRow(rows, []any{&clone, &orig}, func() error { rootOf[clone] = orig; return nil })
	return rootOf, err
}

// isoCheck reads every request against the ledger: a clone's original by
// rootOf (clone → original, as webhook_events.replay_of holds it), its
// tenant and addressee by the ledger. A clone not in the ledger's
// replays is a recovery's: it stands in for its original at the
// endpoints the original did not reach.
func isoCheck(l *isoLedger, hits []hit, rootOf map[string]string) (isoChecked, error) {
	c := isoChecked{hits: hits, replays: l.replayOf}
	recoveredOf := map[string][]string{} // original → its recovery clones
	for clone, orig := range rootOf {
		if l.replayOf[clone] == "" {
			recoveredOf[orig] = append(recoveredOf[orig], clone)
			c.recovered++
		}
	}
	for clone, orig := range l.replayOf {
		if rootOf[clone] != orig {
			return c, checkf("replay %s of %s: webhook_events.replay_of reads %q", clone, orig, rootOf[clone])
		}
	}
	got := map[hookKey]int{}
	for _, h := range hits {
		root := h.key.id
		if r, ok := rootOf[root]; ok {
			root = r
		}
		n, ok := l.tenantOf[root]
		switch {
		case !ok:
			c.unknown++
		case h.key.endpoint/hookTenantsEndpoints != n:
			c.crossed++
		}
		if h.status >= 300 {
			c.refused++
			continue
		}
		if got[h.key]++; got[h.key] == 1 {
			c.delivered++
		} else {
			c.dups++
		}
		if ok && h.key.endpoint/hookTenantsEndpoints == n && !slices.Contains(l.want(root), h.key.endpoint) {
			c.stray++
		}
	}
	for _, id := range l.order {
		for _, e := range l.want(id) {
			if got[hookKey{e, id}] > 0 {
				continue
			}
			reached := false
			for _, cl := range recoveredOf[id] {
				reached = reached || got[hookKey{e, cl}] > 0
			}
			if !reached {
				c.missing++
			}
		}
	}
	for clone, orig := range l.replayOf {
		for _, e := range l.want(orig) {
			if got[hookKey{e, clone}] == 0 {
				c.missing++
			}
		}
	}
	return c, nil
}

// waitNothingPending waits until no webhook_outbox row and no delivery
// is pending, or fails after limit; a process of procs that exits fails
// it. It returns when.
func (pr *poolRunner) waitNothingPending(ctx context.Context, limit time.Duration, label string, procs []*proc) (time.Time, error) {
	deadline := time.Now().Add(limit)
	nextLog := time.Now().Add(5 * time.Second)
	for {
		var outbox, deliveries int
		if err := pr.ctl.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_outbox WHERE status = 'pending'),
			(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')`).Scan(&outbox, &deliveries); err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		if outbox+deliveries == 0 {
			return now, nil
		}
		if now.After(deadline) {
			return now, checkf("%s: %d outbox rows and %d deliveries still pending after %s", label, outbox, deliveries, limit)
		}
		if now.After(nextLog) {
			pr.logf("%s: %d outbox rows and %d deliveries pending", label, outbox, deliveries)
			nextLog = now.Add(5 * time.Second)
			if err := anyExited(label, procs); err != nil {
				return now, err
			}
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return now, err
		}
	}
}
