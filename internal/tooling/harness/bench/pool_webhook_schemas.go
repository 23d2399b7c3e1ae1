package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/invoice"
	"github.com/postbox/postbox/webhook"
)

// The pool-webhook-schemas section: what the event-type catalog costs an
// application's enqueues. webhook.EnqueueEvent of 1 KB payloads, each in
// its own transaction from EnqueueGoroutines goroutines for
// EnqueueDuration, with `worker run` fanning out and delivering
// meanwhile, once with no catalog and once with a catalog of
// hookSchemaTypes types, each with a JSON Schema every payload is checked
// against (by the enqueue, and again by the fan-out). Trials alternate
// the two.
const (
	hookSchemaTypes    = 50
	hookSchemaAimRatio = 0.95
)

func (pr *poolRunner) webhookSchemasSection(ctx context.Context) error {
	cases := []bool{false, true}
	rates := map[bool][]float64{}
	err := pr.trials(ctx, []int{1}, func(ctx context.Context, t, rc int) error {
		for _, catalog := range rotate(cases, t) {
			rate, err := pr.webhookSchemasRun(ctx, rc, catalog)
			if err != nil {
				return err
			}
			rates[catalog] = append(rates[catalog], rate)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if median(rates[false]) > 0 {
		r := median(rates[true]) / median(rates[false])
		pr.add(Row{Section: titlePoolWebhookSchemas, Path: fmt.Sprintf("ratio: enqueue throughput, %d types with schemas / no catalog", hookSchemaTypes),
			Figure: fmt.Sprintf("%.2f", r), Unit: "×", Value: r,
			Notes: fmt.Sprintf("medians of %s (tx/s); %s: the aim is a cost ≤ 5%% (≥ %.2f×)", perTrial(rates[true], rates[false]), verdict(r >= hookSchemaAimRatio), hookSchemaAimRatio)})
	}
	return nil
}

// webhookSchemasRun enqueues for EnqueueDuration with rc worker processes
// running and returns the committed enqueues per second.
func (pr *poolRunner) webhookSchemasRun(ctx context.Context, rc int, catalog bool) (float64, error) {
	label := rp(rc) + "webhook.EnqueueEvent, 1 KB payloads, no catalog"
	if catalog {
		label = rp(rc) + fmt.Sprintf("webhook.EnqueueEvent, 1 KB payloads, %d catalog types with schemas", hookSchemaTypes)
	}
	if err := pr.truncate(ctx); err != nil {
		return 0, err
	}
	hooks := startReceiversWith(1, receiverOptions{})
	defer hooks.close()
	// Tenant t0's two endpoints receive every event.
	if _, err := pr.ctl.Exec(ctx, tenantEndpointsSQL, 1, hooks.servers[0].URL, hookTenantsEndpoints); err != nil {
		return 0, fmt.Errorf("%s: endpoints: %w", label, err)
	}
	if catalog {
		var types []webhook.EventType
		for i := range hookSchemaTypes {
			types = append(types, webhook.EventType{Name: fmt.Sprintf("bench.type_%d", i), Description: "a bench type",
				Schema: []byte(invoice.Schema), Example: invoice.Payload(0)})
		}
		if _, err := webhook.SyncEventTypes(ctx, pr.ctl, types); err != nil {
			return 0, fmt.Errorf("%s: catalog: %w", label, err)
		}
	}
	if err := pr.settle(ctx, pr.ctl, "webhook_outbox", "webhook_endpoints"); err != nil {
		return 0, err
	}
	g := pr.po.EnqueueGoroutines
	app, err := pr.pool(ctx, g+poolReserve)
	if err != nil {
		return 0, err
	}
	defer app.Close()
	_, _, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, "webhook schemas "+label)
	if err != nil {
		return 0, err
	}
	defer stop()

	pr.logf("pool webhook schemas: %s: %d goroutines for %s", label, g, pr.po.EnqueueDuration)
	var enq webhook.Enqueuer
	n, elapsed, _, err := enqueueFor(ctx, app, g, pr.po.EnqueueDuration, func(ctx context.Context, tx pgx.Tx, i int) error {
		_, err := enq.EnqueueEvent(ctx, tx, webhook.Event{Tenant: "t0", Type: fmt.Sprintf("bench.type_%d", i%hookSchemaTypes), Payload: invoice.Payload(i)})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pool webhook schemas %s: %w", label, err)
	}
	var rows int
	if err := pr.ctl.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox`).Scan(&rows); err != nil {
		return 0, err
	}
	if rows != n {
		return 0, checkf("pool webhook schemas %s: %d rows in webhook_outbox, %d enqueues committed", label, rows, n)
	}
	rate := perSecond(n, elapsed)
	delivered, _ := hooks.counts()
	pr.add(Row{Section: titlePoolWebhookSchemas, Path: label, Figure: fmtRate(rate), Unit: "tx/s", Value: rate,
		Notes: fmt.Sprintf("%d txs by %d goroutines in %.1f s, %d worker process(es) fanning out meanwhile; %d delivered meanwhile",
			n, g, elapsed.Seconds(), rc, delivered)})
	return rate, nil
}
