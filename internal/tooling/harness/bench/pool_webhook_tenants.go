package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/webhook"
)

// The pool-webhook-tenants section: what tenants cost. The same backlog —
// WebhookEvents events by plain SQL and webhook.EnqueueEvent, each to a
// tenant drawn at random, fanned out to that tenant's two endpoints — is
// drained by `worker run` on a database of one tenant and on one of
// hookTenantsMany tenants (twice as many endpoints, every one proven, as
// in steady running). The receiver tells endpoints apart by path, and
// every request is checked against the tenant its event was enqueued for:
// one delivery to an endpoint of another tenant fails the run. The
// fan-out statement's plan on the large database is printed.
const (
	hookTenantsMany      = 10_000
	hookTenantsEndpoints = 2 // per tenant
	hookTenantsAimRatio  = 0.95
)

// webhookTenantsSection alternates the two databases for every trial and
// reports the large one's drain rate and CPU per delivery against the
// small one's.
func (pr *poolRunner) webhookTenantsSection(ctx context.Context) error {
	cases := []int{1, hookTenantsMany}
	rates, cpus := map[int][]float64{}, map[int][]float64{}
	err := pr.trials(ctx, []int{1}, func(ctx context.Context, t, rc int) error {
		for _, tenants := range rotate(cases, t) {
			rate, cpu, err := pr.webhookTenantsRun(ctx, rc, tenants)
			if err != nil {
				return err
			}
			rates[tenants], cpus[tenants] = append(rates[tenants], rate), append(cpus[tenants], cpu)
		}
		return nil
	})
	if err != nil {
		return err
	}
	many, one := fmtCount(hookTenantsMany), "1 tenant"
	if r := median(rates[hookTenantsMany]) / median(rates[1]); median(rates[1]) > 0 {
		pr.add(Row{Section: titlePoolWebhookTenants, Path: "ratio: drain rate, " + many + " tenants / " + one, Figure: fmt.Sprintf("%.2f", r), Unit: "×", Value: r,
			Notes: fmt.Sprintf("medians of %s; %s: the aim is ≥ %.2f×", perTrial(rates[hookTenantsMany], rates[1]), verdict(r >= hookTenantsAimRatio), hookTenantsAimRatio)})
	}
	if r := median(cpus[1]) / median(cpus[hookTenantsMany]); median(cpus[hookTenantsMany]) > 0 {
		pr.add(Row{Section: titlePoolWebhookTenants, Path: "ratio: CPU per delivery, " + one + " / " + many + " tenants", Figure: fmt.Sprintf("%.2f", r), Unit: "×", Value: r,
			Notes: fmt.Sprintf("machine CPU; medians of %s (ms, %s tenants; 1 tenant); %s: the aim is ≥ %.2f× (the many cost at most 1/%.2f of the one)",
				perTrial(cpus[hookTenantsMany], cpus[1]), many, verdict(r >= hookTenantsAimRatio), hookTenantsAimRatio, hookTenantsAimRatio)})
	}
	return pr.webhookTenantsExplain(ctx)
}

// perTrial lists each trial's a and b.
func perTrial(a, b []float64) string {
	var each []string
	for i := range min(len(a), len(b)) {
		each = append(each, fmt.Sprintf("%.2f/%.2f", a[i], b[i]))
	}
	return "trials " + strings.Join(each, ", ")
}

// tenantEndpointsSQL makes $3 proven endpoints for each of $1 tenants
// ("t0", "t1", …), endpoint i at the receiver $2's path /e/i, each with a
// secret of its own.
const tenantEndpointsSQL = `INSERT INTO webhook_endpoints (tenant_id, url, secret, proven_at)
SELECT 't' || (i / $3::int), $2 || '/e/' || i, 'whsec_' || encode(decode(md5(i::text) || md5((i + 1)::text), 'hex'), 'base64'), now()
FROM generate_series(0, $1::int * $3::int - 1) AS i`

// webhookTenantsRun drains the backlog with rc processes on a database of
// tenants tenants and returns deliveries/s from the first exec and the
// machine's CPU per delivery in ms.
func (pr *poolRunner) webhookTenantsRun(ctx context.Context, rc, tenants int) (float64, float64, error) {
	events := pr.po.WebhookEvents
	want := events * hookTenantsEndpoints
	label := fmt.Sprintf("%s%s tenant(s) × %d endpoints, %d events, receiver at once", rp(rc), fmtCount(tenants), hookTenantsEndpoints, events)
	if err := pr.truncate(ctx); err != nil {
		return 0, 0, err
	}
	hooks := startReceiversWith(1, receiverOptions{byPath: true})
	defer hooks.close()
	if _, err := pr.ctl.Exec(ctx, tenantEndpointsSQL, tenants, hooks.servers[0].URL, hookTenantsEndpoints); err != nil {
		return 0, 0, fmt.Errorf("%s: endpoints: %w", label, err)
	}
	tenantOf, err := pr.insertTenantEvents(ctx, events, tenants)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", label, err)
	}
	if err := pr.settle(ctx, pr.ctl, "webhook_outbox", "webhook_endpoints"); err != nil {
		return 0, 0, err
	}
	procs, started, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, "webhook "+label)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	w, err := pr.waitEveryHook(ctx, hooks, want, backlogLimit, "pool webhook tenants: "+label, procs)
	if err != nil {
		return 0, 0, err
	}
	crossed := 0
	for _, h := range hooks.log() {
		if "t"+strconv.Itoa(h.key.endpoint/hookTenantsEndpoints) != tenantOf[h.key.id] {
			crossed++
		}
	}
	if crossed > 0 {
		return 0, 0, checkf("%s: %d requests to an endpoint of another tenant than their event's", label, crossed)
	}
	rate, cpuMS := perSecond(want, w.doneAt.Sub(started)), w.cpuPerDelivery()
	pr.add(Row{Section: titlePoolWebhookTenants, Path: label, Figure: fmtRate(rate) + " / " + fmt.Sprintf("%.2f", cpuMS), Unit: "deliveries/s from start / ms CPU per delivery", Value: rate,
		Notes: fmt.Sprintf("WEBHOOK_CONCURRENCY=%d; %d delivered, 0 duplicates, 0 lost, 0 to another tenant's endpoint (each request checked against its event's tenant); every endpoint proven; every %dth event by webhook.EnqueueEvent, the rest by plain SQL; machine CPU first→last delivery, every process",
			pr.po.WebhookConcurrency, want, hookEnqueueShare)})
	return rate, cpuMS, nil
}

// insertTenantEvents writes n events, each for a tenant drawn at random
// among tenants: by plain SQL, and every hookEnqueueShare-th through
// webhook.EnqueueEvent with Event.Tenant. It returns each event's tenant
// by id, the webhook-id its receivers see.
func (pr *poolRunner) insertTenantEvents(ctx context.Context, n, tenants int) (map[string]string, error) {
	tenantOf := make(map[string]string, n)
	viaGo := n / hookEnqueueShare
	rows, err := pr.ctl.Query(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload)
SELECT 't' || floor(random() * $2::int)::int, 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i, 'amount_due', 12000, 'currency', 'eur')
FROM generate_series(1, $1::int) AS i RETURNING id::text, tenant_id`, n-viaGo, tenants)
	if err != nil {
		return nil, err
	}
	var id, tenant string
	if _, err := pgx.ForEachRow(rows, []any{&id, &tenant}, func() error { tenantOf[id] = tenant; return nil }); err != nil {
		return nil, err
	}
	for i := range viaGo {
		tenant := "t" + strconv.Itoa(i*7919%tenants)
		id, err := pr.enqueueEvent(ctx, webhook.Event{Tenant: tenant, Type: "invoice.paid",
			Payload: fmt.Appendf(nil, `{"invoice_id":"in_go_%d","amount_due":12000,"currency":"eur"}`, i)})
		if err != nil {
			return nil, err
		}
		tenantOf[id] = tenant
	}
	return tenantOf, nil
}

// enqueueEvent enqueues ev through webhook.EnqueueEvent in a transaction
// of its own and returns its id.
func (pr *poolRunner) enqueueEvent(ctx context.Context, ev webhook.Event) (string, error) {
	var id string
	err := pgx.BeginFunc(ctx, pr.ctl, func(tx pgx.Tx) error {
		var err error
		id, err = webhook.Enqueuer{}.EnqueueEvent(ctx, tx, ev)
		return err
	})
	return id, err
}

// webhookTenantsExplain prints the plan of the fan-out of one event on
// the database of hookTenantsMany tenants, taken as the dispatcher sends
// it (recorded), in a transaction rolled back.
func (pr *poolRunner) webhookTenantsExplain(ctx context.Context) error {
	if err := pr.truncate(ctx); err != nil {
		return err
	}
	if _, err := pr.ctl.Exec(ctx, tenantEndpointsSQL, hookTenantsMany, "http://127.0.0.1:9", hookTenantsEndpoints); err != nil {
		return err
	}
	ids, err := pr.insertTenantEvents(ctx, 2, hookTenantsMany)
	if err != nil {
		return err
	}
	if err := pr.settle(ctx, pr.ctl, "webhook_outbox", "webhook_endpoints"); err != nil {
		return err
	}
	rec := &recorder{DB: pr.ctl}
	d, err := webhook.NewDispatcher(rec, webhook.Config{Settings: webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		return err
	}
	defer d.Close()
	var first, second string
	for id := range ids {
		if first == "" {
			first = id
		} else {
			second = id
		}
	}
	if _, err := d.DispatchFromOutbox(ctx, first); err != nil {
		return fmt.Errorf("fan out one event: %w", err)
	}
	st, ok := rec.find("INSERT INTO webhook_events")
	if !ok {
		return fmt.Errorf("the fan-out statement was not recorded")
	}
	args := append([]any{[]string{second}}, st.args[1:]...)
	plan, err := explainRolledBack(ctx, pr.ctl, st.sql, args)
	if err != nil {
		return fmt.Errorf("explain the fan-out: %w", err)
	}
	pr.rep.Explains = append(pr.rep.Explains, Explain{Name: fmt.Sprintf("webhook fan-out of one event, %s tenants × %d endpoints", fmtCount(hookTenantsMany), hookTenantsEndpoints), SQL: st.sql, Plan: plan})
	return nil
}
