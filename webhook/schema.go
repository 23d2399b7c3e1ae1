package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// A payload of a catalog type with a schema (eventtype.go) is checked
// against it twice over: by EnqueueEvent, which refuses it in the
// application's transaction, and by the fan-out, which is the check that
// counts — a plain-SQL row is seen only there, and the catalog may have
// changed since the enqueue. Postgres cannot run JSON Schema, so the
// fan-out leases the rows of such types, checks them here, and fans out
// those that pass (outbox.go); a row that fails is marked failed with the
// message EnqueueEvent would have returned, and nothing is sent.
//
// The catalog names each schema by a digest of its text (schema_digest),
// so each schema is compiled once per process however many types share it,
// and a schema that changes is a new digest, never a stale compiled one.

// ErrPayloadSchema is matched (errors.Is) by the refusal of a payload that
// fails its event type's schema; the error names the failing locations.
var ErrPayloadSchema = errors.New("webhook: payload does not match its event type's schema")

// maxCompiledSchemas bounds the process's compiled schemas; past it the
// cache starts over (a catalog has tens of types, not thousands).
const maxCompiledSchemas = 1024

// schemaCache is the process's compiled schemas by digest, and each event
// type's digest as last read: a guess EnqueueEvent checks against what its
// INSERT reads (enqueueSQL), never a source of truth.
type schemaCache struct {
	mu       sync.Mutex
	compiled map[string]compiledSchema // digest → schema
	digestOf map[string]string         // event type → digest, "" none
}

// compiledSchema is a schema compiled, and its quickSchema (nil when the
// schema uses a keyword a quickSchema does not model).
type compiledSchema struct {
	full  *jsonschema.Schema
	quick *quickSchema
}

// schemas is shared by every Enqueuer and Dispatcher of the process: a
// schema is a schema whichever database it came from.
var schemas = &schemaCache{compiled: map[string]compiledSchema{}, digestOf: map[string]string{}}

// guess is event type's digest as last seen, "" for none or not yet seen.
func (c *schemaCache) guess(eventType string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.digestOf[eventType]
}

// saw records event type's digest as read from the catalog.
func (c *schemaCache) saw(eventType, digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.digestOf) >= maxCompiledSchemas {
		clear(c.digestOf)
	}
	c.digestOf[eventType] = digest
}

// schemaDigestSQL reads the schema a digest names; any type holding it will
// do, the digest being of the schema's text.
const schemaDigestSQL = `SELECT schema::text FROM webhook_event_types WHERE schema_digest = $1 LIMIT 1`

// errSchemaGone is a digest no catalog type holds any more: the catalog
// changed between the read that named it and this one.
var errSchemaGone = errors.New("the event type's schema changed while it was read; try again")

// schema is the compiled schema of digest, read from db when this process
// has not compiled it yet.
func (c *schemaCache) schema(ctx context.Context, db DB, digest string) (compiledSchema, error) {
	c.mu.Lock()
	s, ok := c.compiled[digest]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	var doc string
	err := db.QueryRow(ctx, schemaDigestSQL, digest).Scan(&doc)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s, errSchemaGone
	case err != nil:
		return s, fmt.Errorf("read the event type's schema: %w", err)
	}
	full, err := CompileSchema([]byte(doc))
	if err != nil {
		return s, err
	}
	s = compiledSchema{full: full, quick: newQuickSchema(full)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.compiled) >= maxCompiledSchemas {
		clear(c.compiled)
	}
	c.compiled[digest] = s
	return s, nil
}

// check is nil when payload, valid JSON, matches the schema digest names
// ("" none), or the refusal that says where it does not. Both callers
// hold valid JSON: EnqueueEvent has checked it, the fan-out reads jsonb.
func (c *schemaCache) check(ctx context.Context, db DB, eventType, digest string, payload []byte) error {
	if digest == "" {
		return nil
	}
	s, err := c.schema(ctx, db, digest)
	if err != nil {
		return err
	}
	if s.quick != nil && s.quick.proves(payload) {
		return nil
	}
	return validatePayload(s.full, eventType, payload)
}

// schemaURL is where a catalog schema is filed in its compiler: a name,
// never fetched.
const schemaURL = "https://postbox.invalid/event-type.schema.json"

// CompileSchema compiles one event type's JSON Schema, draft 2020-12
// unless its $schema names another. A schema is self-contained: a $ref to
// anything outside it is an error, as no worker reads a file or the
// network to check a payload.
func CompileSchema(doc []byte) (*jsonschema.Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(selfContained{})
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("schema does not compile: %s", strings.ReplaceAll(err.Error(), schemaURL, "the schema"))
	}
	return s, nil
}

// selfContained loads nothing: a schema refers only to itself.
type selfContained struct{}

func (selfContained) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is outside the schema: a catalog schema must be self-contained", url)
}

// maxSchemaFailures is how many failing locations a refusal names.
const maxSchemaFailures = 3

var schemaPrinter = message.NewPrinter(language.English)

// validatePayload is nil when payload matches s, else ErrPayloadSchema
// naming up to maxSchemaFailures failing locations as JSON Pointers.
func validatePayload(s *jsonschema.Schema, eventType string, payload []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return ErrInvalidPayload
	}
	err = s.Validate(v)
	var ve *jsonschema.ValidationError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	var failures []string
	var leaves func(*jsonschema.ValidationError)
	leaves = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			failures = append(failures, "at "+pointer(e.InstanceLocation)+": "+e.ErrorKind.LocalizedString(schemaPrinter))
		}
		for _, c := range e.Causes {
			leaves(c)
		}
	}
	leaves(ve)
	more := ""
	if n := len(failures) - maxSchemaFailures; n > 0 {
		failures, more = failures[:maxSchemaFailures], fmt.Sprintf(" (and %d more)", n)
	}
	return fmt.Errorf("%w %s: %s%s", ErrPayloadSchema, eventType, strings.Join(failures, "; "), more)
}

// pointer is an instance location as a JSON Pointer, or "the top level"
// for the root, whose empty pointer would read as nothing.
func pointer(location []string) string {
	if len(location) == 0 {
		return "the top level"
	}
	var b strings.Builder
	for _, tok := range location {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
	}
	return b.String()
}
