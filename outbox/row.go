package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine"
)

// Row is one claimed email_outbox row.
type Row struct {
	ID         string
	Kind       Kind
	CustomerID string
	InvoiceID  string
	Attempts   int // including the claim that returned this row
	CreatedAt  time.Time
	Priority   Priority

	// RawPayload is the payload as stored, for renderers that read keys
	// Payload does not know. Its secret fields may be sealed envelopes (see
	// Enqueuer.Keys); Payload holds them opened.
	RawPayload json.RawMessage

	// Payload is RawPayload decoded, sealed fields opened. Claim leaves it
	// zero; the dispatcher fills it before the renderer sees the row.
	Payload Payload

	// traceparent is the trace the row was enqueued in ("" for none):
	// its attempt's span joins it (internal/engine/tracing).
	traceparent string

	// throttles are the row's attempts since its last requeue that the
	// relay refused for its rate (smtp.ErrThrottled): Attempts less these
	// is what the retry budget counts.
	throttles int

	leaseEnd  time.Time // when the claim's lease runs out (by this clock); marks retry until then
	recipient string    // bare lower-cased address, set by decode
	decodeErr error     // why the payload cannot be sent, set by decode
}

// decode fills Payload and recipient, opening sealed fields with keys, or
// sets decodeErr. A field that does not open is as permanent as a payload
// that does not decode: no key appears on a later attempt unless an
// operator adds it, and then the row's requeue is the way back.
//
// A key spelled other than exactly (see checkPayloadKeys) — a field of
// Payload, or one of declared, the Dispatcher's secret keys — fails the
// row before anything reads it.
func (r *Row) decode(keys *KeyRing, declared []string) {
	var err error
	if err = checkPayloadKeys(r.RawPayload, declared); err != nil {
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
	err := row.Scan(&r.ID, &kind, &r.CustomerID, &r.InvoiceID, (*[]byte)(&r.RawPayload), &r.Attempts, &r.CreatedAt, &r.traceparent, &r.throttles, &r.Priority)
	r.Kind = Kind(kind)
	return r, err
}

// decode decodes one claimed row. A panic in it (a bug, or a payload that
// trips one) is that row's transient failure, recorded with the panic
// value when the row's turn comes; it stops neither the claim nor the
// process.
func (d *Dispatcher) decode(row *Row) {
	defer func() {
		if v := recover(); v != nil {
			d.logger.Error("email row decode panicked; recorded as a transient failure",
				"row_id", row.ID, "panic", fmt.Sprint(v))
			row.decodeErr = &engine.PanicError{Value: v}
		}
	}()
	if h := d.hooks.decode; h != nil {
		h(row)
	}
	row.decode(d.keys, d.secretKeys)
}
