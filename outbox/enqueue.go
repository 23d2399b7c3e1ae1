package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DefaultMaxPayloadBytes is the payload size limit of Enqueue: 10 MiB of
// encoded JSON. The PDF is stored base64-encoded (4/3 of its size), so an
// invoice PDF of up to about 7.5 MB fits with room for the rest.
const DefaultMaxPayloadBytes = 10 << 20

// KickFunc adds a wake-up for the dispatcher to the caller's transaction.
// The jobs package provides one (jobs.EmailKick) that inserts a unique
// River job; outbox itself imports no River package.
type KickFunc func(ctx context.Context, tx pgx.Tx) error

// Enqueuer writes emails into email_outbox inside the caller's transaction.
// The zero value is ready to use: no kick, DefaultMaxPayloadBytes.
type Enqueuer struct {
	// Kick, if set, runs after the row is written, in the same transaction,
	// so the email is picked up within milliseconds of commit instead of at
	// the next tick. A kick that fails fails the Enqueue; roll the
	// transaction back (River's inserts leave it unusable after an error).
	Kick KickFunc

	// MaxPayloadBytes limits the encoded payload; 0 means
	// DefaultMaxPayloadBytes.
	MaxPayloadBytes int
}

const enqueueSQL = `INSERT INTO email_outbox (kind, customer_id, invoice_id, payload)
VALUES ($1, $2, NULLIF($3::text, ''), $4)
RETURNING id::text`

// Enqueue validates email and writes it as one pending row in tx,
// returning the row id. It writes nothing when email is invalid: the error
// is a *ValidationError naming the field (errors.Is(err, ErrInvalid)).
func (e *Enqueuer) Enqueue(ctx context.Context, tx pgx.Tx, email Email) (string, error) {
	if email.Kind == "" {
		email.Kind = KindRaw
	}
	if err := email.Validate(); err != nil {
		return "", err
	}
	payload, err := json.Marshal(email.Payload)
	if err != nil {
		return "", fmt.Errorf("outbox: encode payload: %w", err)
	}
	limit := e.MaxPayloadBytes
	if limit <= 0 {
		limit = DefaultMaxPayloadBytes
	}
	if len(payload) > limit {
		return "", invalid("payload", fmt.Sprintf("is %d bytes encoded, over the limit of %d", len(payload), limit))
	}

	var id string
	if err := tx.QueryRow(ctx, enqueueSQL, string(email.Kind), email.CustomerID, email.InvoiceID, payload).Scan(&id); err != nil {
		return "", fmt.Errorf("outbox: enqueue: %w", err)
	}
	if e.Kick != nil {
		if err := e.Kick(ctx, tx); err != nil {
			return "", fmt.Errorf("outbox: enqueue kick (roll the transaction back): %w", err)
		}
	}
	return id, nil
}

// Enqueue is Enqueuer.Enqueue with the zero Enqueuer: no kick (the next
// tick sends the row) and DefaultMaxPayloadBytes.
func Enqueue(ctx context.Context, tx pgx.Tx, email Email) (string, error) {
	var e Enqueuer
	return e.Enqueue(ctx, tx, email)
}
