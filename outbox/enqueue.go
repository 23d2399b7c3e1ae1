package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/tracing"
)

// DefaultMaxPayloadBytes is the payload size limit of Enqueue: 10 MiB of
// encoded JSON. The PDF is stored base64-encoded (4/3 of its size), so an
// invoice PDF of up to about 7.5 MB fits with room for the rest.
const DefaultMaxPayloadBytes = 10 << 20

// MaxStoredPayloadBytes is the largest payload email_outbox stores, as
// jsonb (pg_column_size), whoever writes the row: migration 00006's CHECK
// constraint email_outbox_payload_size holds plain SQL to it, and a test
// compares the two. It is DefaultMaxPayloadBytes plus 64 KiB of room for
// jsonb's framing and for the envelopes a seal mark writes over a waiting
// row's secrets, so a row Enqueue accepted is never refused by its marks.
const MaxStoredPayloadBytes = DefaultMaxPayloadBytes + 64<<10

// payloadSizeConstraint is that CHECK constraint's name.
const payloadSizeConstraint = "email_outbox_payload_size"

// Enqueuer writes emails into email_outbox inside the caller's transaction.
// The zero value is ready to use, with DefaultMaxPayloadBytes. The table's
// insert trigger wakes the workers when the transaction commits (migration
// 00005), for Enqueue and plain SQL alike: nothing else to set.
type Enqueuer struct {
	// MaxPayloadBytes limits the encoded payload; 0 means
	// DefaultMaxPayloadBytes. The limit applies to the payload as encoded
	// before sealing, so Keys does not change which emails fit.
	MaxPayloadBytes int

	// Keys, if set, seals every secret field the payload holds (setup_url,
	// update_url, password_reset_url, invite_url, public_token, pdf) with
	// its active key, bound to the row id and the field name; the other
	// fields stay readable. The dispatcher needs a ring holding the same
	// key to send the row. Nil stores the secrets in plaintext, as a
	// plain-SQL INSERT does; the dispatcher then seals them if the row's
	// first attempt does not send it.
	Keys *KeyRing

	// SecretKeys are payload keys of Email.Payload.Data that hold secrets
	// (a template directory's kind declares them in kind.json: pass
	// templatedir.Set's SecretPayloadKeys). With Keys they are sealed like
	// the six; without, they are stored in plaintext, as plain SQL stores
	// them. Either way the dispatcher scrubs them once the row is sent.
	// Each must pass ValidateSecretKey.
	SecretKeys []string
}

// enqueueSQL inserts the id too: sealed fields are bound to the row id, so
// it must be known before the row is written. A row holding the same
// idempotency key for the customer makes it insert nothing and return no
// row; enqueueExistingSQL then reads that row's id.
//
// ON CONFLICT waits for a concurrent transaction inserting the same key:
// if it commits, this insert does nothing, and the next statement — a
// fresh READ COMMITTED snapshot — sees its row; if it rolls back, this
// insert goes ahead. Under REPEATABLE READ the conflict with a row the
// snapshot cannot see is a serialization failure (40001), returned as is.
//
// $7 is Email.SendAt, NULL for now; a time already past is now too, so a
// scheduled row is never written behind the claim window (claim.Window),
// where only the sweep would find it.
//
// $9 is Email.Priority, NULL for the kind's: the table's trigger reads it.
const enqueueSQL = `INSERT INTO email_outbox (id, kind, customer_id, invoice_id, payload, idempotency_key, traceparent, next_attempt_at, priority)
VALUES ($1, $2, $3, NULLIF($4::text, ''), $5, NULLIF($6::text, ''), NULLIF($8::text, ''), greatest(coalesce($7::timestamptz, now()), now()),
	NULLIF($9::smallint, 0))
ON CONFLICT (customer_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id`

const enqueueExistingSQL = `SELECT id FROM email_outbox WHERE customer_id = $1 AND idempotency_key = $2`

// Enqueue validates email and writes it as one pending row in tx,
// returning the row id. The trace context of ctx's span, if any, is
// recorded with the row, and the spans of its attempts join that trace. It writes nothing when email is invalid: the error
// is a *ValidationError naming the field (errors.Is(err, ErrInvalid)). With
// an IdempotencyKey the customer already used, it writes nothing and
// returns the id of the row that holds the key.
func (e *Enqueuer) Enqueue(ctx context.Context, tx pgx.Tx, email Email) (string, error) {
	if email.Kind == "" {
		email.Kind = KindRaw
	}
	if err := email.Validate(); err != nil {
		return "", err
	}
	sendAt, err := sendAtArg(email.SendAt, time.Now())
	if err != nil {
		return "", err
	}
	limit := e.MaxPayloadBytes
	if limit <= 0 {
		limit = DefaultMaxPayloadBytes
	}
	extra, err := secretKeySet(e.SecretKeys)
	if err != nil {
		return "", fmt.Errorf("outbox: Enqueuer.SecretKeys: %w", err)
	}
	id := newRowID()
	payload, err := encodePayload(e.Keys, extra, id, email.Payload, limit)
	if err != nil {
		return "", err
	}
	err = tx.QueryRow(ctx, enqueueSQL, id, string(email.Kind), email.CustomerID, email.InvoiceID, payload, email.IdempotencyKey, sendAt,
		tracing.Traceparent(ctx), int16(email.Priority)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// The key is taken: the existing row is the enqueue.
		if err := tx.QueryRow(ctx, enqueueExistingSQL, email.CustomerID, email.IdempotencyKey).Scan(&id); err != nil {
			return "", fmt.Errorf("outbox: enqueue: read the row holding the idempotency key: %w", err)
		}
		return id, nil
	}
	if err != nil {
		if claim.IsCheckViolation(err, payloadSizeConstraint) {
			// Only with a MaxPayloadBytes above the default: the stored
			// document is over what email_outbox takes from anyone.
			return "", invalid("payload", fmt.Sprintf("is over the stored limit of %d bytes (constraint %s)",
				MaxStoredPayloadBytes, payloadSizeConstraint))
		}
		return "", fmt.Errorf("outbox: enqueue: %w", err)
	}
	return id, nil
}

// newRowID returns a time-ordered (version 7, RFC 9562) UUID in the form
// Postgres prints it, so the associated data sealed here matches the
// id::text the dispatcher reads back. Its first 48 bits are the time in
// milliseconds, so the row's entries land on the right-hand edge of the
// primary key and of email_attempts', as postbox_uuidv7() makes them for
// plain SQL (migration 00011): the rest is random.
func newRowID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// Enqueue is Enqueuer.Enqueue with the zero Enqueuer (the insert trigger
// wakes the workers at commit), DefaultMaxPayloadBytes and no keys (secret fields
// are stored in plaintext until a failed attempt seals them). Use an
// Enqueuer with Keys to seal them from the start.
func Enqueue(ctx context.Context, tx pgx.Tx, email Email) (string, error) {
	var e Enqueuer
	return e.Enqueue(ctx, tx, email)
}
