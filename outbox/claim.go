package outbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/postbox/postbox/internal/engine"
	"github.com/postbox/postbox/internal/engine/claim"
)

// DB is what the outbox needs from Postgres (Exec, Query, QueryRow,
// SendBatch and Begin of pgx), the same interface as webhook.DB: a
// *pgxpool.Pool in production, or a connection or a transaction. The dispatcher must
// get a pool, never a transaction: its claim has to commit before anything
// is sent, and its marks must commit as soon as they are made, not with
// the caller's transaction.
type DB = claim.DB

// table is email_outbox as the shared claim machinery sees it: claimed
// fairly, by priority and then round-robin over customers (see
// docs/design/outbox-transport.md, Priorities and fair shares).
var table = claim.Table{
	Name:      "email_outbox",
	DueColumn: "next_attempt_at",
	Returning: "id::text, kind, customer_id, coalesce(invoice_id, ''), payload, attempts, created_at, coalesce(traceparent, ''), throttles, priority",
	Fair:      &claim.Share{Priority: "priority", Key: "email_outbox.customer_id"},
}

// Claim takes up to n pending, due rows in one short statement of its own
// (see docs/design/outbox-transport.md, Claim and lease): each row's
// attempts goes up by one and its next_attempt_at moves to now() + lease,
// so no other claimer takes it until the lease expires. Rows locked by
// another transaction are skipped, never waited for. The statement has
// committed when Claim returns, before anything is sent.
//
// It takes the most urgent rows first (the lowest Priority), and within a
// priority each customer's oldest due row before any customer's second,
// among the first n due rows of every customer it meets; a Dispatcher
// remembers the customers it has met, so its claims share the pool's
// rows out among them however deep one's backlog is (claim.Fair).
//
// Most callers want Dispatcher, which claims, sends and marks.
//
// The rows come back in the claim's order: the most urgent first, then
// each customer's first row, then each one's second, and so on.
func Claim(ctx context.Context, db DB, n int, lease time.Duration) ([]Row, error) {
	rows, _, _, err := claimFair(ctx, db, &claim.Fair{}, nil, n, lease)
	return rows, err
}

// claimFair is the fair claim from f's edges, through bucket b
// (EMAIL_RATE_LIMIT's; nil: no limit) in the claim's own transaction: see
// claim.ClaimFair. more reports due rows left behind.
func claimFair(ctx context.Context, db DB, f *claim.Fair, b *claim.Bucket, n int, lease time.Duration) (rows []Row, held claim.Held, more bool, err error) {
	return claim.ClaimFair(ctx, db, table, f, n, lease, claim.FairOptions{Bucket: b}, scanRow, rowKey)
}

// rowKey is a claimed row's key in the fair claim: its priority and its
// customer.
func rowKey(r Row) claim.ShareKey {
	return claim.ShareKey{Priority: int16(r.Priority), Key: r.CustomerID}
}

// emailSource is email_outbox as the engine's Lane drains it (its
// engine.Source), as webhook's outboxSource and retrySource are its tables.
type emailSource struct{ d *Dispatcher }

// Claim claims up to n batches' rows in one statement (one short claim
// transaction: see docs/design/outbox-transport.md, Claim and lease), each
// row under the lease of a single batch, and deals them out over the n slots:
// a full claim makes n batches of Leases.BatchSize, and a short one — a few
// rows just committed — one batch per row up to n, so they are sent side by
// side rather than one after another. It also reads the suppression entries
// of every claimed recipient in one query.
func (s emailSource) Claim(ctx context.Context, n int) (engine.Claim, error) {
	d := s.d
	if d.stopping() {
		return engine.Claim{}, nil
	}
	if err := d.declare(ctx); err != nil {
		return engine.Claim{}, err
	}
	size := d.leases.BatchSize
	start := time.Now()
	deadline := start.Add(d.leases.BatchTimeout)
	// A second short of the lease, for the clocks of this process and
	// Postgres to disagree by.
	leaseEnd := start.Add(d.leases.ClaimLease(size) - time.Second)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	rows, held, more, err := claimFair(ctx, d.db, &d.fair, d.bucket, n*size, d.leases.ClaimLease(size))
	if err != nil {
		return engine.Claim{}, fmt.Errorf("outbox: %w", err)
	}
	d.metrics.engine().Claimed(table.Name, len(rows))
	wait := again(d.bucket, held)
	if len(rows) == 0 {
		return engine.Claim{Again: wait}, nil
	}
	// Decoding (JSON, and opening sealed fields) is most of a claim's CPU;
	// done per batch in parallel it does not hold back the first sends.
	chunks := deal(rows, n)
	var wg sync.WaitGroup
	for _, chunk := range chunks {
		wg.Go(func() {
			for i := range chunk {
				chunk[i].leaseEnd = leaseEnd
				d.decode(&chunk[i])
			}
		})
	}
	wg.Wait()
	supp := d.loadSuppressions(ctx, rows)
	units := make([]engine.Unit, 0, len(chunks))
	for _, chunk := range chunks {
		units = append(units, &batch{d: d, rows: chunk, deadline: deadline, supp: supp.view(chunk)})
	}
	// A claim short of n batches while customers' rows are left (each
	// took its share) is as full as a full one: the next claim is due at
	// once.
	return engine.Claim{Units: units, Rows: len(rows), Full: len(rows) == n*size || more && wait == 0, Again: wait}, nil
}

// declare puts the Dispatcher's extra secret keys in email_secret_keys
// and its kinds' priorities in email_kind_priorities before it claims
// anything, so the mark of the first row it sends already scrubs them and
// the rows enqueued from then on take the priorities. Once done it costs
// nothing; a failure is the claim's, retried with the next one.
func (d *Dispatcher) declare(ctx context.Context) error {
	if d.declared.Load() {
		return nil
	}
	if err := DeclareSecretKeys(ctx, d.db, d.secretKeys); err != nil {
		return err
	}
	if err := DeclareKindPriorities(ctx, d.db, d.priorities); err != nil {
		return err
	}
	d.declared.Store(true)
	return nil
}

// Sweep moves the rows due behind the claim window into it (claim.Sweep):
// the Dispatcher's lane runs it at an interval, one replica at a time.
func (s emailSource) Sweep(ctx context.Context) (int, []string, error) {
	swept, err := claim.Sweep(ctx, s.d.db, table, &s.d.fair)
	if err != nil {
		err = fmt.Errorf("outbox: %w", err)
	}
	return swept.Rows, swept.First, err
}

// deal deals rows, in the claim's order, into at most n batches as even
// as can be, as cards are dealt: the claim's row i to batch i mod n. Every
// batch then starts with the claim's first rows — the most urgent, each
// customer's first — and keeps claim order, so one customer's row is not
// sent after a batch's worth of another's. No batch is larger than the
// claim's BatchSize, since rows ≤ n × BatchSize. The batches share rows'
// array, rearranged: what is done to a batch's rows is done to rows.
func deal(rows []Row, n int) [][]Row {
	k := min(n, len(rows))
	claimed := slices.Clone(rows)
	out := make([][]Row, 0, k)
	at := 0
	for b := range k {
		start := at
		for i := b; i < len(claimed); i += k {
			rows[at] = claimed[i]
			at++
		}
		out = append(out, rows[start:at])
	}
	return out
}
