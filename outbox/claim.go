package outbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/claim"
)

// DB is what the outbox needs from Postgres: a *pgxpool.Pool in
// production. The dispatcher must get a pool, never a transaction: its
// claim has to commit before anything is sent, and its marks must commit
// as soon as they are made, not with the caller's transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// table is email_outbox as the shared claim machinery sees it.
var table = claim.Table{
	Name:      "email_outbox",
	DueColumn: "next_attempt_at",
	Returning: "id::text, kind, customer_id, coalesce(invoice_id, ''), payload, attempts, created_at",
}

// Row is one claimed email_outbox row.
type Row struct {
	ID         string
	Kind       Kind
	CustomerID string
	InvoiceID  string
	Attempts   int // including the claim that returned this row
	CreatedAt  time.Time

	// RawPayload is the payload as stored, for renderers that read keys
	// Payload does not know. Its secret fields may be sealed envelopes (see
	// Enqueuer.Keys); Payload holds them opened.
	RawPayload json.RawMessage

	// Payload is RawPayload decoded, sealed fields opened. Claim leaves it
	// zero; the dispatcher fills it before the renderer sees the row.
	Payload Payload

	leaseEnd  time.Time // when the claim's lease runs out (by this clock); marks retry until then
	recipient string    // bare lower-cased address, set by decode
	decodeErr error     // why the payload cannot be sent, set by decode
}

// decode fills Payload and recipient, opening sealed fields with keys, or
// sets decodeErr. A field that does not open is as permanent as a payload
// that does not decode: no key appears on a later attempt unless an
// operator adds it, and then the row's requeue is the way back.
//
// A key spelled other than exactly (see checkPayloadKeys) fails the row
// before anything reads it.
func (r *Row) decode(keys *KeyRing) {
	var err error
	if err = checkPayloadKeys(r.RawPayload); err != nil {
		err = fmt.Errorf("decode payload: %w", err)
	} else if bytes.Contains(r.RawPayload, envelopeMarker) {
		r.Payload, err = keys.decodeSealed(r.ID, r.Kind, r.RawPayload)
	} else {
		r.Payload, err = decodePayload(r.Kind, r.RawPayload)
	}
	if err != nil {
		r.decodeErr = permanent(err)
		return
	}
	r.recipient, _ = recipient(r.Payload.To) // validated by the decode
}

func scanRow(row pgx.CollectableRow) (Row, error) {
	var r Row
	var kind string
	// Into *[]byte pgx copies the jsonb's text; into a json.RawMessage it
	// would run json.Unmarshal over it, a full parse that decode repeats.
	err := row.Scan(&r.ID, &kind, &r.CustomerID, &r.InvoiceID, (*[]byte)(&r.RawPayload), &r.Attempts, &r.CreatedAt)
	r.Kind = Kind(kind)
	return r, err
}

// Claim takes up to n pending, due rows, oldest due first, in one short
// statement of its own (ADR-072 decision 1): each row's attempts goes up by
// one and its next_attempt_at moves to now() + lease, so no other claimer
// takes it until the lease expires. Rows locked by another transaction are
// skipped, never waited for. The statement has committed when Claim
// returns, before anything is sent.
//
// Most callers want Dispatcher, which claims, sends and marks.
//
// The rows come back oldest first (by created_at): RETURNING has no order
// of its own, and the rows that waited longest should go out first.
func Claim(ctx context.Context, db DB, n int, lease time.Duration) ([]Row, error) {
	rows, err := claim.Claim(ctx, db, table, n, lease, scanRow)
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return rows, err
}
