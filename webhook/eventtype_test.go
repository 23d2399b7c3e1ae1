package webhook

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// invoicePaid is a catalog type with a schema: an integer amount, required.
func invoicePaid(minimum string) EventType {
	return EventType{Name: "invoice.paid", Description: "An invoice was paid.",
		Schema:  []byte(`{"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer", "minimum": ` + minimum + `}}}`),
		Example: []byte(`{"amount": 100}`)}
}

func syncTypes(t *testing.T, db DB, types ...EventType) Synced {
	t.Helper()
	s, err := SyncEventTypes(context.Background(), db, types)
	if err != nil {
		t.Fatalf("SyncEventTypes: %v", err)
	}
	return s
}

// A payload that fails its type's schema is refused by EnqueueEvent, naming
// where, and written by plain SQL it is marked failed with the same words
// by whichever of two dispatchers claims it: never sent, no event. One
// that matches is sent, and so is every payload of a type without a
// schema. A schema changed after this process last read it is the one an
// enqueue is held to.
func TestEventTypes_SchemaRefusesAtEnqueueAndFailsAtFanOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	syncTypes(t, pool, invoicePaid("0"), EventType{Name: "customer.updated"})
	_, rc := tenantEndpoint(t, pool, "", "invoice.paid", "customer.updated")

	// The first enqueue reads the schema; the second is checked against
	// it before its statement runs.
	goPaid, err := enqueueEvent(t, pool, Event{Type: "invoice.paid", Payload: []byte(`{"amount": 5}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = enqueueEvent(t, pool, Event{Type: "invoice.paid", Payload: []byte(`{"amount": "5"}`)})
	if !errors.Is(err, ErrPayloadSchema) || !strings.Contains(err.Error(), "at /amount: got string, want integer") {
		t.Fatalf("EnqueueEvent(amount as a string) = %v, want ErrPayloadSchema naming /amount", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox`); n != 1 {
		t.Fatalf("a refused enqueue left a row: %d rows, want 1", n)
	}
	goUpdated, err := enqueueEvent(t, pool, Event{Type: "customer.updated", Payload: []byte(`{"anything": true}`)})
	if err != nil {
		t.Fatal(err)
	}
	insert := func(payload string) string {
		t.Helper()
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', $1) RETURNING id`, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	sqlPaid, sqlString, sqlMissing := insert(`{"amount": 7}`), insert(`{"amount": "x"}`), insert(`{}`)

	drainConcurrently(t, pool, 2)
	if got, want := webhookIDs(rc), sorted(goPaid, goUpdated, sqlPaid); !slices.Equal(got, want) {
		t.Errorf("the receiver got %v, want %v: the payloads that match, once each", got, want)
	}
	for id, want := range map[string]string{
		sqlString:  "at /amount: got string, want integer",
		sqlMissing: "at the top level: missing property 'amount'",
	} {
		var status, lastError string
		if err := pool.QueryRow(ctx, `SELECT status, coalesce(last_error, '') FROM webhook_outbox WHERE id = $1`, id).Scan(&status, &lastError); err != nil {
			t.Fatal(err)
		}
		if status != "failed" || !strings.Contains(lastError, want) || !strings.Contains(lastError, "invoice.paid") {
			t.Errorf("row %s: %s, %q; want failed, naming invoice.paid and %q", id, status, lastError, want)
		}
		if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE id = $1`, id); n != 0 {
			t.Errorf("row %s failed its schema but made an event", id)
		}
	}

	// The schema tightens: this process still knows the old one, and the
	// enqueue's own statement reads the new one.
	syncTypes(t, pool, invoicePaid("10"), EventType{Name: "customer.updated"})
	_, err = enqueueEvent(t, pool, Event{Type: "invoice.paid", Payload: []byte(`{"amount": 5}`)})
	if !errors.Is(err, ErrPayloadSchema) || !strings.Contains(err.Error(), "at /amount") {
		t.Fatalf("EnqueueEvent under the new schema = %v, want ErrPayloadSchema naming /amount", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE status = 'pending'`); n != 0 {
		t.Fatalf("the enqueue refused under the new schema left %d pending rows", n)
	}
}

// A schema written by plain SQL that does not compile holds its type's rows
// back — recorded on the row and retried, never sent unchecked, never
// failed for good on the first try — until the schema is fixed.
func TestEventTypes_SchemaThatDoesNotCompileHoldsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_event_types (name, schema) VALUES ('invoice.paid', '{"type": 5}')`); err != nil {
		t.Fatal(err)
	}
	_, rc := tenantEndpoint(t, pool, "", "invoice.paid")
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (event_type, payload) VALUES ('invoice.paid', '{"amount": 1}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := newDispatcher(t, pool, nil).Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	var status, lastError string
	if err := pool.QueryRow(ctx, `SELECT status, coalesce(last_error, '') FROM webhook_outbox WHERE id = $1`, id).Scan(&status, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "pending" || !strings.Contains(lastError, "does not compile") || len(rc.requests()) != 0 {
		t.Fatalf("row under a broken schema: %s, %q, %d requests; want pending, saying it does not compile, nothing sent",
			status, lastError, len(rc.requests()))
	}
}

// While the catalog holds any type, an endpoint subscribes only to catalog
// types: a typo is refused naming the nearest, by CreateEndpoint and
// UpdateEndpoint, and by the database for plain SQL; a sync that would
// leave a subscription outside the catalog is refused whole. An endpoint
// of every type (no filter) never stands in the way.
func TestEventTypes_SubscriptionsOnlyToCatalogTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	typo, _ := tenantEndpoint(t, pool, "acme", "invoice.piad") // the catalog is empty: anything goes
	tenantEndpoint(t, pool, "acme")

	_, err := SyncEventTypes(ctx, pool, []EventType{invoicePaid("0")})
	if !isConstraint(err, "webhook_event_types_subscribed") || !strings.Contains(err.Error(), "invoice.piad") {
		t.Fatalf("sync leaving invoice.piad subscribed = %v, want refused by webhook_event_types_subscribed", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_event_types`); n != 0 {
		t.Fatalf("a refused sync wrote %d types", n)
	}
	if _, err := UpdateEndpoint(ctx, pool, Settings{}, typo.ID, EndpointUpdate{EventTypes: &[]string{"invoice.paid"}}); err != nil {
		t.Fatal(err)
	}
	syncTypes(t, pool, invoicePaid("0"), EventType{Name: "customer.updated"})

	_, err = CreateEndpoint(ctx, pool, Settings{}, EndpointParams{URL: "http://127.0.0.1:1/hooks", EventTypes: []string{"invoice.piad"}})
	if !errors.Is(err, ErrInvalidEndpoint) || !strings.Contains(err.Error(), "did you mean invoice.paid?") {
		t.Errorf("CreateEndpoint(invoice.piad) = %v, want ErrInvalidEndpoint suggesting invoice.paid", err)
	}
	_, err = UpdateEndpoint(ctx, pool, Settings{}, typo.ID, EndpointUpdate{EventTypes: &[]string{"customer.update"}})
	if !errors.Is(err, ErrInvalidEndpoint) || !strings.Contains(err.Error(), "did you mean customer.updated?") {
		t.Errorf("UpdateEndpoint(customer.update) = %v, want ErrInvalidEndpoint suggesting customer.updated", err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO webhook_endpoints (url, secret, event_types) VALUES ('http://127.0.0.1:1/x', 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0', '{invoice.piad}')`)
	if !isConstraint(err, "webhook_event_types_subscribed") {
		t.Errorf("plain SQL endpoint subscribed to invoice.piad: %v, want webhook_event_types_subscribed", err)
	}
	_, err = pool.Exec(ctx, `UPDATE webhook_endpoints SET event_types = '{customer.update}' WHERE id = $1`, typo.ID)
	if !isConstraint(err, "webhook_event_types_subscribed") {
		t.Errorf("plain SQL re-subscription to customer.update: %v, want webhook_event_types_subscribed", err)
	}
	// Removing a subscribed type is refused; an unsubscribed one goes.
	if _, err := SyncEventTypes(ctx, pool, []EventType{{Name: "customer.updated"}}); !isConstraint(err, "webhook_event_types_subscribed") {
		t.Errorf("sync removing subscribed invoice.paid = %v, want refused", err)
	}
	if s := syncTypes(t, pool, invoicePaid("0")); !slices.Equal(s.Removed, []string{"customer.updated"}) {
		t.Errorf("sync removing customer.updated: %+v", s)
	}
}

func isConstraint(err error, name string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.ConstraintName == name
}

// A sync adds, updates and removes, and a sync of what the catalog already
// holds writes nothing; a deprecated type still sends, and its events say
// so when read.
func TestEventTypes_SyncAndDeprecated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a, b := EventType{Name: "a.created", Description: "A"}, EventType{Name: "b.created", Description: "B"}
	if s := syncTypes(t, pool, a, b); !slices.Equal(s.Added, []string{"a.created", "b.created"}) || len(s.Updated)+len(s.Removed) != 0 {
		t.Fatalf("first sync: %+v", s)
	}
	if s := syncTypes(t, pool, b, a); len(s.Added)+len(s.Updated)+len(s.Removed) != 0 {
		t.Fatalf("the same catalog again: %+v, want nothing changed", s)
	}
	a.Description = "A, reworded"
	c := EventType{Name: "c.created", Deprecated: true, Example: []byte(`{"id": 1}`)}
	s := syncTypes(t, pool, a, c)
	if !slices.Equal(s.Added, []string{"c.created"}) || !slices.Equal(s.Updated, []string{"a.created"}) || !slices.Equal(s.Removed, []string{"b.created"}) {
		t.Fatalf("third sync: %+v", s)
	}
	list, err := ListEventTypes(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Description != "A, reworded" || !list[1].Deprecated || string(list[1].Example) != `{"id": 1}` {
		t.Fatalf("ListEventTypes = %+v", list)
	}

	_, rc := tenantEndpoint(t, pool, "", "c.created")
	id, err := enqueueEvent(t, pool, Event{Type: "c.created", Payload: []byte(`{"id": 2}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newDispatcher(t, pool, nil).Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if got := webhookIDs(rc); !slices.Equal(got, []string{id}) {
		t.Fatalf("a deprecated type's event: the receiver got %v, want it", got)
	}
	ev, err := GetEvent(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Deprecated {
		t.Errorf("GetEvent of a deprecated type's event: not flagged")
	}
}

// A catalog directory is refused, naming the file and what is wrong, for
// each thing a sync would refuse or a worker could not check.
func TestLoadEventTypes(t *testing.T) {
	t.Parallel()
	good := `{"description": "An invoice was paid.", "schema": {"type": "object", "required": ["amount"]}, "example": {"amount": 1}}`
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // "" loads
	}{
		{"good", map[string]string{"invoice.paid.json": good, "README.md": "# types", ".hidden": "x"}, ""},
		{"no schema", map[string]string{"invoice.paid.json": `{"description": "d", "schema": null}`}, ""},
		{"empty", map[string]string{"README.md": "# types"}, "holds no <type>.json file"},
		{"unknown key", map[string]string{"invoice.paid.json": `{"descripton": "d"}`}, `unknown field "descripton"`},
		{"not json", map[string]string{"invoice.paid.json": `{`}, "invoice.paid.json"},
		{"other file", map[string]string{"invoice.paid.json": good, "invoice.paid.yaml": "x"}, "invoice.paid.yaml: not a <type>.json file"},
		{"bad name", map[string]string{"invoice paid.json": good}, "printable characters without spaces"},
		{"schema does not compile", map[string]string{"a.b.json": `{"schema": {"type": 5}}`}, "schema does not compile"},
		{"schema is an array", map[string]string{"a.b.json": `{"schema": []}`}, "a JSON object or a boolean"},
		{"schema refers outside", map[string]string{"a.b.json": `{"schema": {"$ref": "https://example.com/s.json"}}`}, "must be self-contained"},
		{"schema refers to a file", map[string]string{"a.b.json": `{"schema": {"$ref": "/etc/passwd"}}`}, "must be self-contained"},
		{"example does not match", map[string]string{"a.b.json": `{"schema": {"type": "object", "required": ["amount"]}, "example": {}}`},
			"the example does not match the schema: at the top level: missing property 'amount'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			types, err := LoadEventTypes(dir)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("LoadEventTypes: %v", err)
			case tc.want == "":
				if len(types) != 1 {
					t.Fatalf("LoadEventTypes = %+v, want one type", types)
				}
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("LoadEventTypes = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
