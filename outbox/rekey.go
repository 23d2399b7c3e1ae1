package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// DefaultRekeyBatch is Rekey's batch size when RekeyOptions.BatchSize is 0.
const DefaultRekeyBatch = 500

// maxRekeyErrors bounds RekeyResult.UnreadableErrors.
const maxRekeyErrors = 20

// RekeyOptions configure Rekey.
type RekeyOptions struct {
	// BatchSize is how many rows each read takes; 0 means
	// DefaultRekeyBatch.
	BatchSize int

	// DryRun reads and counts, and writes nothing.
	DryRun bool

	// Progress, if set, is called after each batch with the totals so far.
	Progress func(RekeyResult)

	// afterRead, set by tests, runs between a batch's read and its writes.
	afterRead func(ids []string)
}

// RekeyResult counts what Rekey did (or, with DryRun, would do).
type RekeyResult struct {
	Batches       int // batches read
	Resealed      int // rows whose secret fields were re-sealed under the active key
	FromPlaintext int // of Resealed, rows that held a secret field in plaintext
	Skipped       int // rows that changed between read and write: left as they are
	Unreadable    int // rows with a sealed field no key of the ring opens: left as they are

	// UnreadableErrors says why, for the first few unreadable rows: each
	// error names the row, the field and the key id. Such a row fails when
	// it is sent; add its key back, or let it fail.
	UnreadableErrors []error
}

// Rekey moves the secret fields of every pending and failed row to the
// active key of keys: fields sealed under another key id of the ring are
// re-sealed, and fields still in plaintext (rows written by plain SQL, or
// before encryption was turned on) are sealed. Dispatched and skipped rows
// hold no secret fields and are not read.
//
// It works in batches in id order, each read followed by one UPDATE per
// row, and each UPDATE is a compare-and-set: it applies only while the row
// still has the status and the secret fields, ciphertexts included, that
// the read saw. So it never races a send or a mark — a row sent, marked,
// sealed by its mark or requeued in between is skipped and counted, never
// overwritten or resurrected. Every write commits on its own: Rekey is
// safe to interrupt and to run again, and a second run picks up what the
// first skipped or did not reach.
//
// Keys stay usable for reading while they are in the ring: the dispatcher
// sends rows under any of them, during and after a rekey. A key may leave
// the ring once CountKeyUse counts no row under it.
func Rekey(ctx context.Context, db DB, keys *KeyRing, opts RekeyOptions) (RekeyResult, error) {
	var res RekeyResult
	if !keys.seals() {
		return res, errors.New("outbox: rekey: no key ring to seal under (set " + KeysEnv + ")")
	}
	n := opts.BatchSize
	if n <= 0 {
		n = DefaultRekeyBatch
	}
	after := "00000000-0000-0000-0000-000000000000"
	for {
		batch, err := readRekeyBatch(ctx, db, keys, after, n)
		if err != nil {
			return res, err
		}
		if len(batch) == 0 {
			return res, nil
		}
		res.Batches++
		after = batch[len(batch)-1].id
		if opts.afterRead != nil {
			ids := make([]string, len(batch))
			for i := range batch {
				ids[i] = batch[i].id
			}
			opts.afterRead(ids)
		}
		for _, r := range batch {
			if r.err != nil {
				res.Unreadable++
				if len(res.UnreadableErrors) < maxRekeyErrors {
					res.UnreadableErrors = append(res.UnreadableErrors, r.err)
				}
				continue
			}
			applied := true
			if !opts.DryRun {
				if applied, err = writeRekey(ctx, db, r); err != nil {
					return res, err
				}
			}
			switch {
			case !applied:
				res.Skipped++
			case r.fromPlaintext:
				res.Resealed++
				res.FromPlaintext++
			default:
				res.Resealed++
			}
		}
		if opts.Progress != nil {
			opts.Progress(res)
		}
		if len(batch) < n {
			return res, nil
		}
	}
}

// rekeyRow is one row a rekey batch read, and what to write to it.
type rekeyRow struct {
	id, status    string
	secrets       json.RawMessage // the secret fields as read: the write's guard
	patch         json.RawMessage // the re-sealed fields, merged over the payload
	fromPlaintext bool
	err           error // why the row cannot be re-sealed
}

// secretsSQL is a row's secret fields as one object (NULL when it has
// none): what a rekey reads, and what its write compares.
var secretsSQL = `(SELECT jsonb_object_agg(key, value) FROM jsonb_each(payload) WHERE key = ANY(` + scrubbedKeysSQL + `))`

// rekeySelectSQL reads the next batch of pending and failed rows (after id
// $1) holding a secret field that is not sealed under the active key $2.
var rekeySelectSQL = `SELECT id::text, status, ` + secretsSQL + ` FROM email_outbox
WHERE status IN ('pending', 'failed') AND id > $1::uuid AND EXISTS (
	SELECT 1 FROM jsonb_each(payload) f
	WHERE f.key = ANY(` + scrubbedKeysSQL + `) AND jsonb_typeof(f.value) <> 'null'
	AND NOT (jsonb_typeof(f.value) = 'object' AND coalesce(f.value->>'enc', '') <> '' AND f.value->>'kid' = $2))
ORDER BY id
LIMIT $3`

func readRekeyBatch(ctx context.Context, db DB, keys *KeyRing, after string, n int) ([]rekeyRow, error) {
	rows, err := db.Query(ctx, rekeySelectSQL, after, keys.ActiveKeyID(), n)
	if err != nil {
		return nil, fmt.Errorf("outbox: rekey: read: %w", err)
	}
	defer rows.Close()
	var batch []rekeyRow
	for rows.Next() {
		var r rekeyRow
		if err := rows.Scan(&r.id, &r.status, &r.secrets); err != nil {
			return nil, fmt.Errorf("outbox: rekey: read: %w", err)
		}
		keys.reseal(&r)
		batch = append(batch, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: rekey: read: %w", err)
	}
	return batch, nil
}

// reseal fills r.patch: each secret field not sealed under the active key,
// opened if sealed and sealed under the active key.
func (k *KeyRing) reseal(r *rekeyRow) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(r.secrets, &fields); err != nil {
		r.err = fmt.Errorf("row %s: secret fields: %w", r.id, err)
		return
	}
	active := k.ActiveKeyID()
	patch := []byte{'{'}
	// fields holds the secret keys only, the six and the declared ones
	// (secretsSQL); sorted, so a batch writes the same bytes each time.
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		v := fields[key]
		if isNull(v) {
			continue
		}
		env, sealed, err := parseEnvelope(v)
		switch {
		case err != nil:
			r.err = fmt.Errorf("row %s: payload.%s: %w", r.id, key, err)
			return
		case sealed && env.KeyID == active:
			continue
		}
		if len(patch) > 1 {
			patch = append(patch, ',')
		}
		if !sealed {
			r.fromPlaintext = true
			patch = k.appendSealedStored(patch, r.id, key, v)
			continue
		}
		value, err := k.open(r.id, key, env)
		if err != nil {
			r.err = fmt.Errorf("row %s: %w", r.id, err)
			return
		}
		patch = k.appendSealed(patch, r.id, key, env.Form, value)
	}
	r.patch = append(patch, '}')
}

// rekeyGuard makes each rekey write a compare-and-set on what the batch
// read: the status and every secret field, ciphertexts included. A row
// dispatched meanwhile (its fields scrubbed), sealed by its failed or
// retry mark, or requeued no longer matches and is left alone; without the
// guard the merge would write the fields back into a sent row.
var rekeyGuard = `AND status = $3 AND ` + secretsSQL + ` = $4::jsonb`

var rekeyUpdateSQL = `UPDATE email_outbox SET payload = payload || $2::jsonb
WHERE id = $1 ` + rekeyGuard

// writeRekey applies one row's re-sealed fields; false means the row
// changed since it was read and was left alone.
func writeRekey(ctx context.Context, db DB, r rekeyRow) (bool, error) {
	tag, err := db.Exec(ctx, rekeyUpdateSQL, r.id, r.patch, r.status, r.secrets)
	if err != nil {
		return false, fmt.Errorf("outbox: rekey: row %s: %w", r.id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// KeyUse counts the pending and failed rows that hold a secret field under
// each key id, and those that hold one in plaintext. (Dispatched and
// skipped rows hold none.) A key may leave the ring once no row is counted
// under it; a row holding fields under two keys counts under both.
type KeyUse struct {
	Rows      map[string]int // key id → rows
	Plaintext int            // rows with a secret field not sealed
}

var keyUseSQL = `SELECT CASE WHEN jsonb_typeof(f.value) = 'object' AND coalesce(f.value->>'enc', '') <> ''
	THEN coalesce(f.value->>'kid', '') ELSE '' END AS kid, count(DISTINCT o.id)
FROM email_outbox o CROSS JOIN LATERAL jsonb_each(o.payload) f
WHERE o.status IN ('pending', 'failed') AND f.key = ANY(` + scrubbedKeysSQL + `) AND jsonb_typeof(f.value) <> 'null'
GROUP BY 1`

// CountKeyUse reads KeyUse in one query.
func CountKeyUse(ctx context.Context, db DB) (KeyUse, error) {
	use := KeyUse{Rows: map[string]int{}}
	rows, err := db.Query(ctx, keyUseSQL)
	if err != nil {
		return use, fmt.Errorf("outbox: count key use: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kid string
		var n int
		if err := rows.Scan(&kid, &n); err != nil {
			return use, fmt.Errorf("outbox: count key use: %w", err)
		}
		if kid == "" {
			use.Plaintext = n
			continue
		}
		use.Rows[kid] = n
	}
	if err := rows.Err(); err != nil {
		return use, fmt.Errorf("outbox: count key use: %w", err)
	}
	return use, nil
}
