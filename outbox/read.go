package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/claim"
)

// ReadWindow bounds ListByCustomer: it reads the last 30 days of a customer's
// emails. It is a read window only; nothing deletes rows (see
// docs/design/outbox-transport.md, Retention).
const ReadWindow = 30 * 24 * time.Hour

// Status is an email_outbox row's state.
type Status string

const (
	StatusPending    Status = "pending"
	StatusDispatched Status = "dispatched"
	StatusSkipped    Status = "skipped"
	StatusFailed     Status = "failed"
	StatusCancelled  Status = "cancelled" // withdrawn by Cancel before it was sent
)

// Record is an email_outbox row as the read APIs return it. The payload's
// secret-bearing keys (see scrubbedPayloadKeys) are never returned, whatever
// the row's status: a timeline or dashboard has no use for them.
type Record struct {
	ID            string
	Kind          Kind
	CustomerID    string
	InvoiceID     string
	Status        Status
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	CreatedAt     time.Time
	DispatchedAt  *time.Time

	// CancelledAt and CancelledBy are when and by whom a cancelled row was
	// withdrawn (Cancel); nil and "" for every other row.
	CancelledAt *time.Time
	CancelledBy string

	// PriorAttempts is the attempts the row made before its requeues: its
	// attempt log numbers the next one PriorAttempts + Attempts + 1.
	PriorAttempts int

	// Traceparent is the W3C trace context the row was enqueued in, ""
	// for none: its attempts' spans are in that trace.
	Traceparent string

	// Fields the invoice timeline and the sent-emails panel show.
	To            string
	Subject       string
	InvoiceNumber string
	AttemptNumber int
	Trigger       string

	// Payload is the stored payload without the secret-bearing keys.
	Payload json.RawMessage

	// LastEvent is the type of the newest delivery event recorded for the
	// row (delivered, bounced, complained, deferred), "" when none came.
	// Status stays the transport's state: a dispatched row that bounced is
	// dispatched with LastEvent bounced. EventsFor returns the whole
	// timeline.
	LastEvent EventType

	// secrets is the secret keys the stored payload holds, each "sealed"
	// or "present" (never a value); scrubbedKeys the ones its sent or
	// skipped mark removed (nil: not known). SecretFields reads both.
	secrets      map[string]string
	scrubbedKeys []string
}

// DefaultListLimit is every list's limit when the caller gives none;
// MaxListLimit caps any limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// listLimit is the limit a list reads: DefaultListLimit for none, at most
// MaxListLimit.
func listLimit(n int) int {
	if n <= 0 {
		return DefaultListLimit
	}
	return min(n, MaxListLimit)
}

var recordColumns = `id::text, kind, customer_id, coalesce(invoice_id, ''), status, attempts, prior_attempts, ` + claim.FiniteTime("next_attempt_at") + `,
	coalesce(last_error, ''), created_at, dispatched_at,
	coalesce(payload->>'to', ''), coalesce(payload->>'subject', ''), coalesce(payload->>'invoice_number', ''),
	coalesce(payload->>'attempt_number', ''), coalesce(payload->>'trigger', ''),
	payload - ` + scrubbedKeysSQL + `, coalesce(traceparent, ''),
	coalesce((SELECT e.type FROM email_events e WHERE e.row_id = email_outbox.id
		ORDER BY e.received_at DESC, e.id DESC LIMIT 1), ''), ` + secretStatesSQL + `, scrubbed_keys, cancelled_at, coalesce(cancelled_by, '')`

// ListByCustomer returns the customer's emails created within ReadWindow,
// newest first, at most limit of them (0 means DefaultListLimit).
func ListByCustomer(ctx context.Context, db DB, customerID string, limit int) ([]Record, error) {
	limit = listLimit(limit)
	rows, err := db.Query(ctx, `SELECT `+recordColumns+` FROM email_outbox
WHERE customer_id = $1 AND created_at > now() - $2::interval
ORDER BY created_at DESC, id
LIMIT $3`, customerID, ReadWindow, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list by customer: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("outbox: list by customer: %w", err)
	}
	return recs, nil
}

// ListByInvoice returns every email of the invoice, newest first, however
// old: the dispatched rows are the invoice's delivery record.
func ListByInvoice(ctx context.Context, db DB, invoiceID string) ([]Record, error) {
	rows, err := db.Query(ctx, `SELECT `+recordColumns+` FROM email_outbox
WHERE invoice_id = $1
ORDER BY created_at DESC, id`, invoiceID)
	if err != nil {
		return nil, fmt.Errorf("outbox: list by invoice: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("outbox: list by invoice: %w", err)
	}
	return recs, nil
}

func scanRecord(row pgx.CollectableRow) (Record, error) {
	var r Record
	var kind, status, attemptNumber, lastEvent, secrets string
	err := row.Scan(&r.ID, &kind, &r.CustomerID, &r.InvoiceID, &status, &r.Attempts, &r.PriorAttempts, &r.NextAttemptAt,
		&r.LastError, &r.CreatedAt, &r.DispatchedAt,
		&r.To, &r.Subject, &r.InvoiceNumber, &attemptNumber, &r.Trigger, &r.Payload, &r.Traceparent, &lastEvent, &secrets, &r.scrubbedKeys,
		&r.CancelledAt, &r.CancelledBy)
	r.Kind, r.Status, r.LastEvent = Kind(kind), Status(status), EventType(lastEvent)
	r.secrets = parseSecretStates(secrets)
	// Written by any language; a non-integer value reads as 0, not an error.
	r.AttemptNumber, _ = strconv.Atoi(attemptNumber)
	return r, err
}
