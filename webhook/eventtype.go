package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/engine/suggest"
)

// The event-type catalog, webhook_event_types (migration 00031), is the
// list of the types an application sends: each with a description, an
// example payload and, optionally, a JSON Schema its payloads must match
// (schema.go). It is kept as a directory of files, one per type, and
// written by SyncEventTypes (`worker event-types sync DIR`), so the
// catalog is reviewed and versioned with the application's code.
//
// While the catalog holds any type, an endpoint may subscribe only to
// catalog types: a typo'd subscription would otherwise never receive a
// thing, silently. A deprecated type still sends; reads flag it.

// EventType is one type of the catalog.
type EventType struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema,omitempty"`  // a JSON Schema (draft 2020-12 unless it says), or none
	Example     json.RawMessage `json:"example,omitempty"` // a payload; it must match Schema
	Deprecated  bool            `json:"deprecated,omitempty"`
	UpdatedAt   time.Time       `json:"updated_at,omitzero"` // as read from the catalog
}

// MaxEventTypeDescriptionBytes and MaxEventTypeDocumentBytes are the
// catalog's CHECKs (migration 00031), for a description and for a schema
// or an example.
const (
	MaxEventTypeDescriptionBytes = 4096
	MaxEventTypeDocumentBytes    = 256 << 10
)

// ErrInvalidEventType is matched (errors.Is) by a catalog entry that
// cannot be used; the error names the type and what is wrong.
var ErrInvalidEventType = errors.New("webhook: invalid event type")

// Check refuses an entry the catalog would, or whose schema does not
// compile, or whose example does not match its schema.
func (t EventType) Check() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrInvalidEventType, t.Name, fmt.Sprintf(format, args...))
	}
	if err := validateEventType(t.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidEventType, err)
	}
	if len(t.Description) > MaxEventTypeDescriptionBytes {
		return fail("description is over %d bytes", MaxEventTypeDescriptionBytes)
	}
	for _, doc := range []struct {
		name string
		v    json.RawMessage
	}{{"schema", t.Schema}, {"example", t.Example}} {
		if len(doc.v) > MaxEventTypeDocumentBytes {
			return fail("%s is over %d bytes", doc.name, MaxEventTypeDocumentBytes)
		}
		if len(doc.v) > 0 && !json.Valid(doc.v) {
			return fail("%s is not valid JSON", doc.name)
		}
	}
	if len(t.Schema) == 0 {
		return nil
	}
	if first := bytes.TrimSpace(t.Schema)[0]; first != '{' && first != 't' && first != 'f' {
		return fail("schema must be a JSON object or a boolean")
	}
	s, err := CompileSchema(t.Schema)
	if err != nil {
		return fail("%v", err)
	}
	if len(t.Example) > 0 {
		if err := validatePayload(s, t.Name, t.Example); err != nil {
			return fail("the example does not match the schema: %v", strings.TrimPrefix(err.Error(), ErrPayloadSchema.Error()+" "+t.Name+": "))
		}
	}
	return nil
}

// eventTypeFile is a catalog file: the type's name is the file's, less
// ".json".
type eventTypeFile struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Example     json.RawMessage `json:"example"`
	Deprecated  bool            `json:"deprecated"`
}

// LoadEventTypes reads a catalog directory: a file <type>.json per type
// (invoice.paid.json) holding an object with "description", and
// optionally "schema", "example" and "deprecated". Each entry is checked
// (EventType.Check); an unknown key, a file of another kind or an empty
// directory is an error that names it. README files and dot files are
// skipped.
func LoadEventTypes(dir string) ([]EventType, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("event types: %w", err)
	}
	var types []EventType
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".") || strings.HasPrefix(strings.ToUpper(name), "README"):
			continue
		case e.IsDir() || !strings.HasSuffix(name, ".json"):
			return nil, fmt.Errorf("event types: %s: not a <type>.json file", filepath.Join(dir, name))
		}
		path := filepath.Join(dir, name)
		body, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("event types: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var f eventTypeFile
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("event types: %s: %w", path, err)
		}
		t := EventType{Name: strings.TrimSuffix(name, ".json"), Description: f.Description, Deprecated: f.Deprecated,
			Schema: nullIsNone(f.Schema), Example: nullIsNone(f.Example)}
		if err := t.Check(); err != nil {
			return nil, fmt.Errorf("event types: %s: %w", path, err)
		}
		types = append(types, t)
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("event types: %s holds no <type>.json file", dir)
	}
	return types, nil
}

// nullIsNone reads a JSON null as no document.
func nullIsNone(v json.RawMessage) json.RawMessage {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil
	}
	return v
}

// Synced is what SyncEventTypes changed.
type Synced struct {
	Added, Updated, Removed []string
}

// The sync's statements. The lock makes two syncs run one after the
// other; the upsert writes only what differs, so a sync of an unchanged
// directory changes nothing (and no schema digest).
const (
	syncLockSQL   = `LOCK TABLE webhook_event_types IN SHARE ROW EXCLUSIVE MODE`
	syncUpsertSQL = `INSERT INTO webhook_event_types AS t (name, description, schema, example, deprecated)
SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::jsonb[], $5::bool[])
ON CONFLICT (name) DO UPDATE SET description = excluded.description, schema = excluded.schema,
	example = excluded.example, deprecated = excluded.deprecated, updated_at = now()
WHERE (t.description, t.schema, t.example, t.deprecated) IS DISTINCT FROM
	(excluded.description, excluded.schema, excluded.example, excluded.deprecated)
RETURNING name, xmax = 0`
	syncRemoveSQL = `DELETE FROM webhook_event_types WHERE NOT (name = ANY ($1::text[])) RETURNING name`
)

// SyncEventTypes makes the catalog hold exactly types, in one
// transaction: new types are added, changed ones updated, and types not
// among them removed. It is refused, changing nothing, when an endpoint
// subscribes to a type the catalog would no longer hold. A changed schema
// applies to every payload not yet fanned out.
func SyncEventTypes(ctx context.Context, db DB, types []EventType) (Synced, error) {
	var (
		names, descriptions  = make([]string, len(types)), make([]string, len(types))
		schemaDocs, examples = make([]*string, len(types)), make([]*string, len(types))
		deprecated           = make([]bool, len(types))
	)
	for i, t := range types {
		if err := t.Check(); err != nil {
			return Synced{}, err
		}
		if slices.Contains(names[:i], t.Name) {
			return Synced{}, fmt.Errorf("%w %s: listed twice", ErrInvalidEventType, t.Name)
		}
		names[i], descriptions[i], deprecated[i] = t.Name, t.Description, t.Deprecated
		schemaDocs[i], examples[i] = document(t.Schema), document(t.Example)
	}
	var s Synced
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, syncLockSQL); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, syncUpsertSQL, names, descriptions, schemaDocs, examples, deprecated)
		var name string
		var added bool
		if _, err := pgx.ForEachRow(rows, []any{&name, &added}, func() error {
			if added {
				s.Added = append(s.Added, name)
			} else {
				s.Updated = append(s.Updated, name)
			}
			return nil
		}); err != nil {
			return err
		}
		removed, err := tx.Query(ctx, syncRemoveSQL, names)
		if err != nil {
			return err
		}
		s.Removed, err = pgx.CollectRows(removed, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return Synced{}, fmt.Errorf("webhook: sync event types: %w", err)
	}
	for _, l := range [][]string{s.Added, s.Updated, s.Removed} {
		slices.Sort(l)
	}
	return s, nil
}

// document is a JSON document as a query argument: nil for none.
func document(v json.RawMessage) *string {
	if len(v) == 0 {
		return nil
	}
	s := string(v)
	return &s
}

// ListEventTypes returns the catalog, by name.
func ListEventTypes(ctx context.Context, db DB) ([]EventType, error) {
	rows, _ := db.Query(ctx, `SELECT name, description, schema, example, deprecated, updated_at FROM webhook_event_types ORDER BY name`)
	types, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventType, error) {
		var t EventType
		var schema, example []byte
		err := row.Scan(&t.Name, &t.Description, &schema, &example, &t.Deprecated, &t.UpdatedAt)
		t.Schema, t.Example = schema, example
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: list event types: %w", err)
	}
	return types, nil
}

// checkSubscriptions refuses subscriptions to types the catalog does not
// hold, while it holds any, naming the nearest catalog type: the Go side
// of migration 00031's rule, which holds it for plain SQL.
func checkSubscriptions(ctx context.Context, db DB, types []string) error {
	if len(types) == 0 {
		return nil
	}
	rows, _ := db.Query(ctx, `SELECT name FROM webhook_event_types ORDER BY name`)
	catalog, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("webhook: read the event-type catalog: %w", err)
	}
	if len(catalog) == 0 {
		return nil
	}
	for _, t := range types {
		if !slices.Contains(catalog, t) {
			return fmt.Errorf("%w: event type %q is not in the catalog (worker event-types list)%s", ErrInvalidEndpoint, t, suggest.DidYouMean(t, catalog))
		}
	}
	return nil
}
