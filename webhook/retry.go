package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/claim"
)

// deliveriesTable is webhook_deliveries for the shared claim.
var deliveriesTable = claim.Table{
	Name:      "webhook_deliveries",
	DueColumn: "next_retry_at",
	// The lease left, as Postgres measures it: see leaseEnd.
	Returning: "id, attempts, EXTRACT(EPOCH FROM next_retry_at - clock_timestamp())::float8",

	// LEGACY BRANCH (ADR-072 accepted residual, pre-P5 rollout): deliveries
	// written before P5 may be pending with next_retry_at NULL — the old
	// fan-out inserted them unleased. Without this branch they would never
	// be claimed, so never delivered. Every row born since is leased (see
	// bornDeliveriesSQL), so this can go once no pending row has a NULL
	// next_retry_at:
	//
	//	SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND next_retry_at IS NULL;
	//
	// Locked by TestRetry_ClaimsLegacyNullNextRetryAt.
	LegacyNullDue: true,
}

type claimedDelivery struct {
	ID       string
	Attempts int
	Left     *float64
}

// Retry is one pass of the retry worker (ADR-072 decision 7; its periodic
// job is leader-inserted and unique). It claims up to RetryClaimBatch due
// pending deliveries at a time with lease RetryClaimLease(n) — the claim
// increments attempts — and attempts each, re-signed with a fresh
// timestamp, until no due delivery is left or the drain window has passed;
// then it waits for the attempts it started. JobTimeout bounds it.
//
// It claims only as many deliveries as it has attempt slots for, taken
// before the claim: a claimed delivery never queues, so none is claimed —
// and its attempt counted — without being sent.
func (p *Pipeline) Retry(ctx context.Context) (Summary, error) {
	r := p.newRunner()
	claimCtx, cancel := context.WithTimeout(ctx, p.window)
	defer cancel()
	var err error
	for claimCtx.Err() == nil && !p.stopped.Load() {
		slots := p.acquireSlots(claimCtx, p.lc.RetryClaimBatch)
		if slots == 0 {
			break
		}
		var ds []delivery
		if ds, err = p.claimRetries(claimCtx, slots); err != nil {
			p.releaseSlots(slots)
			break
		}
		p.releaseSlots(slots - len(ds))
		r.count(Summary{Claimed: len(ds)})
		for _, d := range ds {
			r.launch(ctx, d)
		}
		if len(ds) < slots {
			break
		}
	}
	sum := r.finish(ctx)
	if err != nil && ctx.Err() == nil && claimCtx.Err() != nil {
		err = nil // the window closing mid-claim is the bound working
	}
	return sum, err
}

// claimRetries claims up to n due deliveries and loads what their attempts
// need: the event's body and the endpoint's url, secret and state.
func (p *Pipeline) claimRetries(ctx context.Context, n int) ([]delivery, error) {
	sent := time.Now()
	claimed, err := claim.Claim(ctx, p.pool, deliveriesTable, n, p.lc.RetryClaimLease(n), pgx.RowToStructByPos[claimedDelivery])
	if err != nil || len(claimed) == 0 {
		return nil, err
	}
	p.metrics.claim("webhook_deliveries", len(claimed))
	ids := make([]string, len(claimed))
	byID := make(map[string]claimedDelivery, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
		byID[c.ID] = c
	}
	ds, err := p.loadDeliveries(ctx, ids)
	if err != nil {
		// Claimed but unloadable: hand them back rather than let them wait
		// out a lease nobody is using.
		n, rerr := claim.Release(ctx, p.pool, deliveriesTable, ids)
		p.metrics.release("webhook_deliveries", int(n))
		if rerr != nil {
			p.logger.Warn("release claimed deliveries", "deliveries", len(ids), "error", rerr.Error())
		}
		return nil, err
	}
	for i := range ds {
		c := byID[ds[i].id]
		ds[i].attempt = c.Attempts
		ds[i].leaseEnd = leaseEnd(sent, c.Left)
	}
	return ds, nil
}

func (p *Pipeline) loadDeliveries(ctx context.Context, ids []string) ([]delivery, error) {
	rows, err := p.pool.Query(ctx, `SELECT d.id, d.event_id, d.endpoint_id, ep.url, ep.secret, ep.enabled,
	e.event_type, e.payload, e.created_at
FROM webhook_deliveries d
JOIN webhook_events e ON e.id = d.event_id
JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
WHERE d.id = ANY ($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("webhook: load claimed deliveries: %w", err)
	}
	events := map[string]event{}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (delivery, error) {
		var (
			d         delivery
			eventType string
			payload   []byte
			createdAt time.Time
		)
		if err := row.Scan(&d.id, &d.eventID, &d.endpointID, &d.url, &d.secret, &d.enabled,
			&eventType, &payload, &createdAt); err != nil {
			return d, err
		}
		ev, ok := events[d.eventID]
		if !ok {
			var err error
			if ev, err = newEvent(eventType, createdAt, payload); err != nil {
				return d, err
			}
			events[d.eventID] = ev
		}
		d.event = ev
		return d, nil
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: load claimed deliveries: %w", err)
	}
	return ds, nil
}
