package webhook

import (
	"context"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
)

// attemptUnit is one leased delivery's attempt, in a slot its lane holds
// for it: a first attempt, its delivery born leased by a fan-out or a
// replay, or a retry the retry lane claimed.
type attemptUnit struct {
	p      *Dispatcher
	d      delivery
	fanOut trace.SpanContext // a first attempt's fan-out span; none for a retry
}

// racedUnit is the unit of a delivery born held whose birth may have raced
// the mark ahead of it (delivery.raced): it takes the delivery
// (takeRaced) before its attempt, if it may go, and does nothing if not.
// Until then it holds no lease: it waits for a slot as a birth does, by
// the birth lease it would have had.
func (p *Dispatcher) racedUnit(d delivery, began time.Time, fanOut trace.SpanContext) *attemptUnit {
	d.leaseEnd = began.Add(p.lc.BirthLeaseWindow)
	return &attemptUnit{p: p, d: d, fanOut: fanOut}
}

// Run makes the attempt. When it delivered an ordered delivery, the unit
// hands the key on (handOn): it claims the key's next deliveries into its
// own slot and attempts them one after another, for up to a
// DeliveryBudget of chaining, so a hot key goes out at its receiver's pace
// rather than one wake-up and retry-lane claim per event. What it cannot
// chain the trigger of migration 00023 hands to the retry lane as before.
//
// The chain keeps one delivery leased ahead of the one out: once the
// receiver accepted a delivery, the next request goes at once, and the
// accepted one's mark — which claims the one after — commits while it is
// out. A step is then the receiver's round trip, not the round trip plus a
// commit. The next is sent only after every earlier one was accepted; if
// this process dies before an accepted one's mark commits, that one is
// sent again once its lease ends, after the next: a duplicate of a
// delivered event, which receivers drop by its webhook-id (see
// docs/design/outbox-transport.md, Ordered delivery). One not accepted
// stops the chain, and what was leased ahead goes back uncounted
// (giveBack).
func (u *attemptUnit) Run(ctx context.Context) Tally {
	if !u.p.mayStart(u.d) {
		return u.release(ctx, "too late for the lease, or stopping")
	}
	if !u.d.leased && (!u.d.raced || !u.p.takeRaced(ctx, &u.d)) {
		return Tally{}
	}
	began := time.Now()
	var (
		t       Tally
		ahead   []handedOn      // leased for the chain, not sent yet, in order
		marking chan markResult // the mark of the last accepted delivery, committing
	)
	collect := func() {
		if marking != nil {
			r := <-marking
			t.Add(r.t)
			ahead = append(ahead, r.next...)
			marking = nil
		}
	}
	for {
		handOn := u.handsOn(began)
		a := u.p.try(ctx, u.d, u.fanOut)
		collect()
		if handOn && a.accepted() && len(ahead) > 0 {
			marking = make(chan markResult, 1)
			go u.p.finishAside(a, ids(ahead), marking)
		} else {
			last, next := u.p.finish(a, handOn, ids(ahead))
			t.Add(last)
			ahead = append(ahead, next...)
		}
		if !a.accepted() || len(ahead) == 0 {
			break
		}
		d, ok := u.p.loadHanded(ctx, ahead[0])
		ahead = ahead[1:]
		if !ok {
			break
		}
		u.d, u.fanOut = d, trace.SpanContext{}
		if !u.p.mayStart(u.d) {
			t.Add(u.release(ctx, "too late for the lease, or stopping"))
			break
		}
		if u.p.slots.OlderWaits(u.d.orderingSeq) {
			// Older ordered work waits for a slot here: this slot goes
			// to it, and the key to whichever replica claims its turn
			// first (claimTurns), so that many keys on few slots take
			// turns oldest first, and no replica keeps more keys than
			// its slots while another has slots free.
			t.Add(u.p.passTurn(ctx, u.d.id))
			break
		}
	}
	collect()
	u.p.giveBack(ctx, ids(ahead))
	return t
}

// markResult is what a mark written beside the chain's next request did.
type markResult struct {
	t    Tally
	next []handedOn
}

// finishAside finishes a while the chain's next request is out, and sends
// what the mark did on done. A panic in it is the unit's as if it ran in
// its goroutine (engine.Lane recovers those): recorded as a lost mark, the
// delivery waits out its lease.
func (p *Dispatcher) finishAside(a *tried, ahead []string, done chan<- markResult) {
	defer func() {
		if v := recover(); v != nil {
			err := &engine.PanicError{Value: v}
			p.logger.Error("panic while marking a delivered ordered delivery; it is attempted again when its lease expires",
				"delivery_id", a.d.id, "panic", err.Error(), "stack", string(debug.Stack()))
			t := Tally{Panics: 1, MarkErrors: 1}
			t.NoteError(err.Error())
			done <- markResult{t: t}
		}
	}()
	t, next := p.finish(a, true, ahead)
	done <- markResult{t: t, next: next}
}

// ids are the deliveries' ids.
func ids(hs []handedOn) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.id
	}
	return out
}

// giveBackSQL returns deliveries a chain leased ahead and never sent: due
// now, unleased, and without the attempt their claim counted, since no
// request was made — a key whose head fails again and again must not
// spend the attempts of the deliveries behind it.
const giveBackSQL = `UPDATE webhook_deliveries SET attempts = attempts - 1, leased_until = NULL, next_retry_at = now()
WHERE id = ANY ($1::uuid[]) AND status = 'pending' AND attempts > 0`

// giveBack hands the deliveries a chain leased ahead and never sent back
// to their key (giveBackSQL), for the mark of the delivery before them or
// any replica's claim of the key's turn. One it cannot give back waits
// out its lease, its attempt counted, as after a crash.
func (p *Dispatcher) giveBack(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := claim.MarkContext(ctx)
	defer cancel()
	if _, err := p.pool.Exec(ctx, giveBackSQL, ids); err != nil {
		p.logger.Warn("could not give back deliveries leased ahead of an ordered key's chain; they wait out their lease",
			"delivery_ids", ids, "error", err.Error())
	}
}

// SlotKey is whose slot the attempt holds: its endpoint's, which may hold
// no more than its share of them while others wait (engine.Keyed).
func (u *attemptUnit) SlotKey() string { return u.d.endpointID }

// Rank is an ordered delivery's place in its key: waiting for a slot,
// older ones go first (engine.Ranked).
func (u *attemptUnit) Rank() (int64, bool) { return u.d.orderingSeq, u.d.orderingKey != "" }

// handsOn reports whether the unit's next mark may hand its key on: the
// delivery is ordered, the unit has chained for less than a DeliveryBudget,
// and the pipeline is not stopping.
func (u *attemptUnit) handsOn(began time.Time) bool {
	return u.d.orderingKey != "" && time.Since(began) < u.p.lc.DeliveryBudget && !u.p.stopped.Load()
}

// loadHanded is the delivery a mark handed its key on to, as the mark read
// it or, failing that, loaded again; one it cannot load is released to the
// retry lane.
func (p *Dispatcher) loadHanded(ctx context.Context, h handedOn) (delivery, bool) {
	if h.loaded {
		p.metrics.engine().Claimed(deliveriesTable.Name, 1)
		d := h.d
		d.attempt, d.leaseEnd, d.leased = h.attempt, leaseEnd(h.sent, h.left), true
		return d, true
	}
	ds, err := p.loadDeliveries(ctx, []string{h.id})
	if err != nil || len(ds) != 1 {
		n, _ := claim.Release(ctx, p.pool, deliveriesTable, []string{h.id}, "handed an ordered key on but could not be loaded", p.logger)
		p.metrics.engine().Released(deliveriesTable.Name, int(n))
		return delivery{}, false
	}
	p.metrics.engine().Claimed(deliveriesTable.Name, 1)
	d := ds[0]
	d.attempt, d.leaseEnd, d.leased = h.attempt, leaseEnd(h.sent, h.left), true
	return d, true
}

// StartBy is the last moment the attempt may start within its lease.
func (u *attemptUnit) StartBy() time.Time { return u.p.startBy(u.d) }

// Release gives the unstarted delivery back to the retry worker at once,
// instead of after its lease. It keeps the attempt its birth or claim
// counted (claim.Release): like a claim-then-crash, it still advances
// toward its bound.
func (u *attemptUnit) Release(ctx context.Context) Tally {
	u.p.metrics.deferred(1)
	return u.release(ctx, "no attempt slot within the lease, or stopping: left to the retry worker")
}

func (u *attemptUnit) release(ctx context.Context, why string) Tally {
	if !u.d.leased {
		return Tally{} // a raced unit not yet taken holds nothing
	}
	n, _ := claim.Release(ctx, u.p.pool, deliveriesTable, []string{u.d.id}, why, u.p.logger)
	u.p.metrics.engine().Released(deliveriesTable.Name, int(n))
	return Tally{Released: int(n)}
}

// Panicked records the attempt as failed with the panic value, retried on
// the schedule like any transient failure.
func (u *attemptUnit) Panicked(ctx context.Context, v any) Tally {
	if !u.d.leased {
		return Tally{} // a raced unit that panicked before it took its delivery
	}
	m := Result{Attempt: u.d.attempt, Error: (&engine.PanicError{Value: v}).Error()}
	t, _ := u.p.record(ctx, u.d, &m, classed{class: engine.Transient}, false, false, nil)
	return t
}
