package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The operator's lookups (worker show, the console): one row by id, a
// recipient's rows, the failed rows. Like ListByInvoice they return
// Records, which never carry a secret field's value.

// Get returns the email_outbox row id, or an error matching ErrNotFound.
func Get(ctx context.Context, db DB, id string) (Record, error) {
	if !IsRowID(id) {
		return Record{}, fmt.Errorf("%w: %q is not an email id (a UUID)", ErrNotFound, id)
	}
	rows, err := db.Query(ctx, `SELECT `+recordColumns+` FROM email_outbox WHERE id = $1`, id)
	if err != nil {
		return Record{}, fmt.Errorf("outbox: get %s: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRecord)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return Record{}, fmt.Errorf("outbox: get %s: %w", id, err)
	}
	return r, nil
}

// ListByRecipient returns the emails to address (compared as the
// suppression list compares it: the bare address, lower-cased) created
// within ReadWindow, newest first, at most limit (0 means
// DefaultListLimit). No index serves it: it reads the window's rows, which
// is fine for an operator's lookup and never runs on a hot path.
func ListByRecipient(ctx context.Context, db DB, address string, limit int) ([]Record, error) {
	addr, err := recipient(address)
	if err != nil {
		return nil, invalid("address", "is not a single valid address: "+err.Error())
	}
	limit = listLimit(limit)
	// The stored "to" may carry a display name ("Ada <ada@example.com>"):
	// match the bare address inside it, then check it exactly in Go.
	rows, err := db.Query(ctx, `SELECT `+recordColumns+` FROM email_outbox
WHERE created_at > now() - $2::interval AND strpos(lower(payload->>'to'), $1) > 0
ORDER BY created_at DESC, id
LIMIT $3`, addr, ReadWindow, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list by recipient: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("outbox: list by recipient: %w", err)
	}
	out := recs[:0]
	for _, r := range recs {
		if got, err := recipient(r.To); err == nil && got == addr {
			out = append(out, r)
		}
	}
	return out, nil
}

// ListFailed returns the newest failed rows, at most limit (0 means
// DefaultListLimit), through the failed partial index, whose predicate
// (migration 00010) it states in full.
func ListFailed(ctx context.Context, db DB, limit int) ([]Record, error) {
	limit = listLimit(limit)
	rows, err := db.Query(ctx, `SELECT `+recordColumns+` FROM email_outbox
WHERE status = 'failed' AND created_at IS NOT NULL ORDER BY created_at DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list failed: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("outbox: list failed: %w", err)
	}
	return recs, nil
}

// Secret states: what an operator is told about a secret payload field in
// place of its value.
const (
	SecretSealed   = "sealed"   // stored as an envelope under OUTBOX_ENCRYPTION_KEYS
	SecretPresent  = "present"  // stored in plaintext (no key ring, or written by plain SQL)
	SecretScrubbed = "scrubbed" // removed by the dispatched or skipped mark
)

// SecretField is one secret key of a row and its state; never its value.
type SecretField struct {
	Key   string `json:"key"`
	State string `json:"state"`
}

// SecretFields says, for each secret key (scrubbedPayloadKeys, then the
// declared ones, sorted) the row holds or held, what became of it: sealed
// or present while it is pending or failed; scrubbed once it is
// dispatched, skipped or cancelled, for the keys the mark removed. A row
// scrubbed before postbox recorded which keys it removed (migration
// 00013) lists all six, since any of them may have been there.
func (r Record) SecretFields() []SecretField {
	var out []SecretField
	scrubbed := r.Status == StatusDispatched || r.Status == StatusSkipped || r.Status == StatusCancelled
	var declared []string
	for k := range r.secrets {
		if !slices.Contains(scrubbedPayloadKeys, k) {
			declared = append(declared, k)
		}
	}
	for _, k := range r.scrubbedKeys {
		if !slices.Contains(scrubbedPayloadKeys, k) && !slices.Contains(declared, k) {
			declared = append(declared, k)
		}
	}
	slices.Sort(declared)
	for _, k := range slices.Concat(scrubbedPayloadKeys, declared) {
		state, held := r.secrets[k]
		switch {
		case held:
			out = append(out, SecretField{k, state})
		case scrubbed && (r.scrubbedKeys == nil || slices.Contains(r.scrubbedKeys, k)):
			out = append(out, SecretField{k, SecretScrubbed})
		}
	}
	return out
}

// secretStatesSQL is, per row, the secret keys the payload holds and
// whether each is sealed: "k=sealed,k2=present". It reads key names and
// envelope markers only; no value leaves the database.
var secretStatesSQL = `coalesce((SELECT string_agg(k || '=' || CASE WHEN jsonb_typeof(payload->k) = 'object' AND payload->k ? 'enc'
	THEN 'sealed' ELSE 'present' END, ',') FROM unnest(` + scrubbedKeysSQL + `) AS k WHERE payload ? k AND payload->k <> 'null'::jsonb), '')`

func parseSecretStates(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
