package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/webhook"
)

// The pool-webhook-ordered section's aims: delivery in order per key costs
// at most a fifth of the unordered rate when there are at least as many
// keys as attempt slots, and one hot key goes at its receiver's pace
// without slowing the others.
const (
	orderedAimRatio  = 0.8  // ordered ÷ unordered deliveries/s
	orderedAimHot    = 0.95 // the hot key's deliveries/s ÷ (1 ÷ receiver delay), first→last: the loopback round trip and a replica's start take the rest
	orderedAimOthers = 0.9  // the other keys' deliveries/s beside the hot key ÷ without it
	orderedKeysPer   = 4    // keys per attempt slot in the ordered runs
	orderedHotEvents = 200  // the hot key's events
)

// orderedKind is one run of the section.
type orderedKind struct {
	name string
	keys int // ordering keys the events are spread over; 0: unordered
	hot  int // events of one more key, enqueued before the others
}

// webhookOrderedSection drains WebhookEvents events to one endpoint with
// the most WebhookReplicas `worker run` processes: unordered, spread over
// orderedKeysPer × WEBHOOK_CONCURRENCY ordering keys, and the same keys
// beside one hot key of orderedHotEvents events; then the River peer (one
// job per delivery, tuned: open-source River has no ordering, so it is the
// unordered reference) in the same trial. Each ordered run reads, at the
// receiver, every key's deliveries in their order of arrival: an inversion
// (an event before an earlier one of its key) fails the section;
// duplicates, which at-least-once allows, are counted.
func (pr *poolRunner) webhookOrderedSection(ctx context.Context) error {
	rc := pr.po.WebhookReplicas[len(pr.po.WebhookReplicas)-1]
	keys := orderedKeysPer * pr.po.WebhookConcurrency
	kinds := []orderedKind{
		{name: "unordered"},
		{name: fmt.Sprintf("ordered, %d keys", keys), keys: keys},
		{name: fmt.Sprintf("ordered, %d keys and one hot key of %d events", keys, orderedHotEvents), keys: keys, hot: orderedHotEvents},
	}
	rates := map[string][]float64{}
	var hotRates, otherRates []float64
	err := pr.trials(ctx, []int{rc}, func(ctx context.Context, t, rc int) error {
		for _, k := range rotate(kinds, t) {
			r, err := pr.orderedRun(ctx, rc, k)
			if err != nil {
				return err
			}
			rates[k.name] = append(rates[k.name], r.all)
			if k.hot > 0 {
				hotRates, otherRates = append(hotRates, r.hot), append(otherRates, r.others)
			}
		}
		peer := pr.hookPeer(pathPeerTuned)
		rate, err := pr.webhookRun(ctx, peer, rc, 1, pr.po.WebhookConcurrency, pr.po.ReceiverDelay, "")
		rates[peer.name] = append(rates[peer.name], rate)
		return err
	})
	if err != nil {
		return err
	}
	ratio := func(path string, a, b []float64, aim float64, what string) {
		var each []string
		for t := range min(len(a), len(b)) {
			each = append(each, fmt.Sprintf("%.2f", a[t]/b[t]))
		}
		r := median(a) / median(b)
		pr.add(Row{Section: titlePoolWebhookOrdered, Path: rp(rc) + path, Figure: fmt.Sprintf("%.2f", r), Unit: "×", Value: r,
			Notes: fmt.Sprintf("medians; per trial %s; %s: the aim is ≥ %g× (%s)", strings.Join(each, ", "), verdict(r >= aim), aim, what)})
	}
	ratio("ratio ordered / unordered", rates[kinds[1].name], rates[kinds[0].name], orderedAimRatio,
		fmt.Sprintf("%d keys ≥ WEBHOOK_CONCURRENCY=%d", keys, pr.po.WebhookConcurrency))
	pace := 1 / pr.po.ReceiverDelay.Seconds()
	paces := make([]float64, len(hotRates))
	for i := range paces {
		paces[i] = pace
	}
	ratio("hot key / its receiver's pace", hotRates, paces, orderedAimHot, fmt.Sprintf("1 ÷ %s = %.0f/s", pr.po.ReceiverDelay, pace))
	ratio("other keys beside the hot key / without it", otherRates, rates[kinds[1].name], orderedAimOthers, "deliveries/s of the other keys, first→last")
	return nil
}

// orderedRate is what one ordered run delivered: every delivery a second
// from the first exec, the hot key's and the other keys' first→last.
type orderedRate struct{ all, hot, others float64 }

// orderedRun drains one kind of backlog with rc processes.
func (pr *poolRunner) orderedRun(ctx context.Context, rc int, k orderedKind) (orderedRate, error) {
	events := pr.po.WebhookEvents
	want := events + k.hot
	label := fmt.Sprintf("%spostbox worker run, %s, %d events, receiver %s", rp(rc), k.name, want, pr.po.ReceiverDelay)
	if err := pr.truncate(ctx); err != nil {
		return orderedRate{}, err
	}
	hooks := startReceiversWith(1, receiverOptions{delay: pr.po.ReceiverDelay})
	defer hooks.close()
	if _, err := pr.hookEndpoints(ctx, hooks); err != nil {
		return orderedRate{}, err
	}
	pr.logf("pool webhook ordered: %s: inserting %d events", label, want)
	if err := pr.insertOrdered(ctx, k, events); err != nil {
		return orderedRate{}, fmt.Errorf("pool webhook ordered %s: %w", label, err)
	}
	order, err := pr.eventOrder(ctx)
	if err != nil {
		return orderedRate{}, err
	}
	if err := pr.settle(ctx, pr.ctl, "webhook_outbox", "webhook_endpoints"); err != nil {
		return orderedRate{}, err
	}
	procs, started, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, "webhook ordered "+label)
	if err != nil {
		return orderedRate{}, err
	}
	defer stop()
	w, err := pr.waitHooks(ctx, hooks, want, backlogLimit, "pool webhook ordered: "+label, procs)
	if err != nil {
		return orderedRate{}, err
	}
	if w.got < want {
		return orderedRate{}, checkf("pool webhook ordered %s: %d of %d deliveries arrived within %s", label, w.got, want, backlogLimit)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate sent just after the last first arrival still counts
	total, _ := hooks.counts()
	hits := hooks.log()
	inversions, hot, others := readOrder(hits, order)
	if inversions > 0 {
		return orderedRate{}, checkf("pool webhook ordered %s: %d deliveries arrived before an earlier event of their key", label, inversions)
	}
	r := orderedRate{all: perSecond(want, w.doneAt.Sub(started)), hot: hot.rate(), others: others.rate()}
	notes := fmt.Sprintf("WEBHOOK_CONCURRENCY=%d per process; %d delivered, 0 inversions, %d duplicates (at-least-once), 0 lost; %.2f s from the first exec; machine CPU %.2f ms per delivered webhook",
		pr.po.WebhookConcurrency, want, total-want, w.doneAt.Sub(started).Seconds(), w.cpuPerDelivery())
	if k.hot > 0 {
		notes += fmt.Sprintf("; the hot key %s/s first→last over %d events, the other keys %s/s", fmtRate(r.hot), hot.n, fmtRate(r.others))
	}
	pr.add(Row{Section: titlePoolWebhookOrdered, Path: label, Figure: fmtRate(r.all), Unit: "deliveries/s from start", Value: r.all, Notes: notes})
	return r, nil
}

// hotKey is the ordering key of a run's hot events.
const hotKey = "hot"

// insertOrdered writes k's backlog before any process starts: the hot
// key's events first, then events spread over k.keys keys in turn (none
// when k.keys is 0), by plain SQL, with every hookEnqueueShare-th through
// webhook.Enqueuer in a transaction of its own.
func (pr *poolRunner) insertOrdered(ctx context.Context, k orderedKind, events int) error {
	const insert = `INSERT INTO webhook_outbox (event_type, payload, ordering_key)
SELECT 'invoice.paid', jsonb_build_object('invoice_id', 'in_' || i), CASE WHEN $3::text <> '' THEN $3 WHEN $4::int > 0 THEN 'k' || (i % $4) END
FROM generate_series($1::int, $2::int) AS i ORDER BY i`
	if k.hot > 0 {
		if _, err := pr.ctl.Exec(ctx, insert, 0, k.hot-1, hotKey, 0); err != nil {
			return err
		}
	}
	for from := 0; from < events; from += hookEnqueueShare {
		to := min(from+hookEnqueueShare, events) - 1
		if _, err := pr.ctl.Exec(ctx, insert, from+1, to, "", k.keys); err != nil {
			return err
		}
		key := ""
		if k.keys > 0 {
			key = fmt.Sprintf("k%d", from%k.keys)
		}
		err := pgx.BeginFunc(ctx, pr.ctl, func(tx pgx.Tx) error {
			_, err := (webhook.Enqueuer{}).EnqueueEvent(ctx, tx, webhook.Event{Type: "invoice.paid",
				Payload: fmt.Appendf(nil, `{"invoice_id":"in_%d"}`, from), OrderingKey: key})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// eventPlace is an event's ordering key and its place in the key.
type eventPlace struct {
	key string
	seq int64
}

// eventOrder reads every keyed event's key and place, by the id the
// receivers see as webhook-id.
func (pr *poolRunner) eventOrder(ctx context.Context) (map[string]eventPlace, error) {
	rows, err := pr.ctl.Query(ctx, `SELECT id::text, ordering_key, ordering_seq FROM webhook_outbox WHERE ordering_key IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	order := map[string]eventPlace{}
	var (
		id string
		p  eventPlace
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &p.key, &p.seq}, func() error {
		order[id] = p
		return nil
	})
	return order, err
}

// span is a run of deliveries: how many, the first's and the last's
// arrival.
type span struct {
	n           int
	first, last time.Time
}

func (s *span) add(at time.Time) {
	if s.n == 0 || at.Before(s.first) {
		s.first = at
	}
	if at.After(s.last) {
		s.last = at
	}
	s.n++
}

// rate is the span's deliveries a second, first→last.
func (s span) rate() float64 {
	if s.n < 2 {
		return 0
	}
	return perSecond(s.n-1, s.last.Sub(s.first))
}

// readOrder reads the successful deliveries in their order of arrival:
// how many arrived after a later event of their key had (inversions), and
// the spans of the hot key's and the other keyed events' first deliveries.
// A duplicate of an event already delivered is neither an inversion nor
// counted again.
func readOrder(hits []hit, order map[string]eventPlace) (inversions int, hot, others span) {
	last := map[string]int64{}
	seen := map[hookKey]bool{}
	for _, h := range hits {
		p, ok := order[h.key.id]
		if h.status >= 300 || !ok || seen[h.key] {
			continue
		}
		seen[h.key] = true
		if prev, ok := last[p.key]; ok && p.seq < prev {
			inversions++
		}
		last[p.key] = max(last[p.key], p.seq)
		if p.key == hotKey {
			hot.add(h.at)
		} else {
			others.add(h.at)
		}
	}
	return inversions, hot, others
}
