package webhook

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// tenantEndpoint creates an endpoint of tenant (none for "") on a fresh
// receiver, proven, so its first attempts go out in the fan-out.
func tenantEndpoint(t *testing.T, db DB, tenant string, eventTypes ...string) (Endpoint, *receiver) {
	t.Helper()
	rc := newReceiver(t, nil)
	ep, err := CreateEndpoint(context.Background(), db, Settings{}, EndpointParams{Tenant: tenant, URL: rc.URL, EventTypes: eventTypes})
	if err != nil {
		t.Fatalf("CreateEndpoint(tenant %q): %v", tenant, err)
	}
	if _, err := db.Exec(context.Background(), `UPDATE webhook_endpoints SET proven_at = now() WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	return ep, rc
}

// drainConcurrently drains pool's outbox with n dispatchers at once, each
// claiming from the same rows, and returns them.
func drainConcurrently(t *testing.T, pool *pgxpool.Pool, n int) []*Dispatcher {
	t.Helper()
	ps := make([]*Dispatcher, n)
	for i := range ps {
		ps[i] = newDispatcher(t, pool, nil)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, p := range ps {
		wg.Go(func() { _, errs[i] = p.Drain(context.Background(), testWindow) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ps
}

// webhookIDs are the webhook-id headers rc received, sorted.
func webhookIDs(rc *receiver) []string {
	var ids []string
	for _, r := range rc.requests() {
		ids = append(ids, r.Header.Get("webhook-id"))
	}
	slices.Sort(ids)
	return ids
}

// Events of a tenant reach that tenant's endpoints subscribed to their
// type and no one else's; events without a tenant reach only endpoints
// without one — enqueued by the Go API and by plain SQL, fanned out by two
// dispatchers claiming the same rows at once, and replayed.
func TestTenant_FanOutReachesOnlyItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	acmeAll, rcAcmeAll := tenantEndpoint(t, pool, "acme")
	acmeInv, rcAcmeInv := tenantEndpoint(t, pool, "acme", "invoice.paid")
	_, rcGlobex := tenantEndpoint(t, pool, "globex", "invoice.paid")
	_, rcNone := tenantEndpoint(t, pool, "")

	acmePaid, err := enqueueEvent(t, pool, Event{Tenant: "acme", Type: "invoice.paid", Payload: []byte(`{"invoice":"in_a"}`)})
	if err != nil {
		t.Fatal(err)
	}
	nonePaid, err := enqueueEvent(t, pool, Event{Type: "invoice.paid", Payload: []byte(`{"invoice":"in_n"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var globexPaid, acmeUpdated string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload)
		VALUES ('globex', 'invoice.paid', '{"invoice":"in_g"}') RETURNING id`).Scan(&globexPaid); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload)
		VALUES ('acme', 'customer.updated', '{"customer":"cus_a"}') RETURNING id`).Scan(&acmeUpdated); err != nil {
		t.Fatal(err)
	}

	ps := drainConcurrently(t, pool, 2)
	want := map[*receiver][]string{
		rcAcmeAll: sorted(acmePaid, acmeUpdated),
		rcAcmeInv: {acmePaid},
		rcGlobex:  {globexPaid},
		rcNone:    {nonePaid},
	}
	names := map[*receiver]string{rcAcmeAll: "acme (all types)", rcAcmeInv: "acme (invoice.paid)", rcGlobex: "globex", rcNone: "no tenant"}
	check := func(when string) {
		t.Helper()
		for rc, ids := range want {
			if got := webhookIDs(rc); !slices.Equal(got, ids) {
				t.Errorf("%s: %s received %v, want %v", when, names[rc], got, ids)
			}
		}
	}
	check("fan-out")
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE id = $1 AND tenant_id = 'acme'`, acmePaid); n != 1 {
		t.Errorf("acme's event does not keep its tenant")
	}

	// A replay goes to the tenant's endpoints only, as ReplayTargets says.
	targets, err := ReplayTargets(ctx, pool, acmePaid)
	if err != nil {
		t.Fatal(err)
	}
	var targetIDs []string
	for _, ep := range targets {
		targetIDs = append(targetIDs, ep.ID)
		if ep.Tenant != "acme" {
			t.Errorf("ReplayTargets lists endpoint %s of tenant %q", ep.ID, ep.Tenant)
		}
	}
	if !slices.Equal(sorted(targetIDs...), sorted(acmeAll.ID, acmeInv.ID)) {
		t.Errorf("ReplayTargets(acme's event) = %v, want acme's two endpoints", targetIDs)
	}
	rep, err := ps[0].ReplayEvent(ctx, acmePaid)
	if err != nil {
		t.Fatal(err)
	}
	want[rcAcmeAll] = sorted(acmePaid, acmeUpdated, rep.EventID)
	want[rcAcmeInv] = sorted(acmePaid, rep.EventID)
	check("replay")
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE id = $1 AND tenant_id = 'acme'`, rep.EventID); n != 1 {
		t.Errorf("the replay's clone does not keep acme as its tenant")
	}
}

// An event addressed (EndpointID) to an endpoint of another tenant is
// refused by EnqueueEvent; written by plain SQL, the fan-out marks its row
// failed, saying why, and sends nothing.
func TestTenant_AddressedToAnotherTenantsEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	acme, rcAcme := tenantEndpoint(t, pool, "acme")
	globex, rcGlobex := tenantEndpoint(t, pool, "globex")
	none, rcNone := tenantEndpoint(t, pool, "")
	const missing = "01a24ba7-0000-7000-8000-0000000000ff"

	for _, tc := range []struct {
		name   string
		tenant string
		to     string
	}{
		{"acme's event to globex's endpoint", "acme", globex.ID},
		{"acme's event to an endpoint of no tenant", "acme", none.ID},
		{"acme's event to no endpoint", "acme", missing},
		{"an event of no tenant to acme's endpoint", "", acme.ID},
	} {
		_, err := enqueueEvent(t, pool, Event{Tenant: tc.tenant, Type: "invoice.paid", Payload: []byte(`{}`), EndpointID: tc.to})
		if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), tc.to) {
			t.Errorf("%s: %v, want ErrInvalidEvent naming the endpoint", tc.name, err)
		}
	}
	own, err := enqueueEvent(t, pool, Event{Tenant: "acme", Type: "invoice.paid", Payload: []byte(`{}`), EndpointID: acme.ID})
	if err != nil {
		t.Fatalf("acme's event to acme's endpoint: %v", err)
	}

	var misaddressed string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload, endpoint_id)
		VALUES ('acme', 'invoice.paid', '{}', $1) RETURNING id`, globex.ID).Scan(&misaddressed); err != nil {
		t.Fatal(err)
	}
	if _, err := newDispatcher(t, pool, nil).Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if got := webhookIDs(rcAcme); !slices.Equal(got, []string{own}) {
		t.Errorf("acme's endpoint received %v, want its own addressed event %s", got, own)
	}
	if n := len(rcGlobex.requests()) + len(rcNone.requests()); n != 0 {
		t.Errorf("globex's and the untenanted endpoint received %d requests, want none", n)
	}
	var status, lastError string
	if err := pool.QueryRow(ctx, `SELECT status, coalesce(last_error, '') FROM webhook_outbox WHERE id = $1`, misaddressed).Scan(&status, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(lastError, globex.ID) || !strings.Contains(lastError, "not one of its tenant's endpoints") {
		t.Errorf("the misaddressed plain-SQL row: %s, %q; want failed, naming the endpoint", status, lastError)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE id = $1`, misaddressed); n != 0 {
		t.Errorf("the misaddressed row made an event")
	}
}

// Idempotency keys are unique per tenant: Globex's in_1.paid does not
// swallow Acme's, and a repeat within a tenant returns that tenant's row —
// by the Go API and by plain SQL.
func TestTenant_IdempotencyKeyPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	enqueue := func(tenant string) string {
		t.Helper()
		id, err := enqueueEvent(t, pool, Event{Tenant: tenant, Type: "invoice.paid", Payload: []byte(`{}`), IdempotencyKey: "in_1.paid"})
		if err != nil {
			t.Fatalf("tenant %q: %v", tenant, err)
		}
		return id
	}
	// Globex's row first, so a lookup that ignored the tenant would
	// find it before Acme's.
	globex := enqueue("globex")
	acme := enqueue("acme")
	none := enqueue("")
	if globex == acme || acme == none || globex == none {
		t.Fatalf("one key under globex, acme and no tenant: %s, %s, %s; want three rows", globex, acme, none)
	}
	for tenant, want := range map[string]string{"acme": acme, "globex": globex, "": none} {
		if got := enqueue(tenant); got != want {
			t.Errorf("tenant %q again: %s, want its row %s", tenant, got, want)
		}
	}
	tag, err := pool.Exec(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload, idempotency_key)
		VALUES ('acme', 'invoice.paid', '{}', 'in_1.paid'), ('initech', 'invoice.paid', '{}', 'in_1.paid')
		ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("plain SQL for acme and initech: %v, %d rows; want initech's only", err, tag.RowsAffected())
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox`); n != 4 {
		t.Fatalf("%d rows, want 4: one per tenant and one without", n)
	}
}

// The database holds the tenant rule by itself: a statement that births a
// delivery of an event to an endpoint of another tenant fails whole — a
// hand-written INSERT, and the fan-out of a release before tenants, whose
// events carry no tenant_id of their own and inherit their row's — and an
// endpoint cannot change tenant.
func TestTenant_DatabaseRefusesACrossTenantDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	acme, _ := tenantEndpoint(t, pool, "acme")
	globex, _ := tenantEndpoint(t, pool, "globex")
	isGuard := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == "webhook_deliveries_tenant_guard"
	}

	var row string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_outbox (tenant_id, event_type, payload)
		VALUES ('acme', 'invoice.paid', '{}') RETURNING id`).Scan(&row); err != nil {
		t.Fatal(err)
	}
	// The fan-out as a release before tenants wrote it: every enabled
	// endpoint subscribed to the type, the event without tenant_id.
	_, err := pool.Exec(ctx, `WITH claimed AS (
		UPDATE webhook_outbox o SET status = 'dispatched', dispatched_at = now() WHERE o.id = $1 AND o.status = 'pending'
		RETURNING o.id, o.event_type, o.payload
	), inserted AS (
		INSERT INTO webhook_events (id, event_type, payload, outbox_id) SELECT id, event_type, payload, id FROM claimed
		RETURNING id, event_type
	)
	INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at)
	SELECT i.id, ep.id, 1, now() + interval '1 minute' FROM inserted i
	JOIN webhook_endpoints ep ON ep.enabled AND (cardinality(ep.event_types) = 0 OR i.event_type = ANY (ep.event_types))`, row)
	if !isGuard(err) {
		t.Fatalf("a tenant-blind fan-out: %v, want webhook_deliveries_tenant_guard's check_violation", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1 AND status = 'pending'`, row); n != 1 {
		t.Fatalf("the refused fan-out changed its row: it must stay pending for a replica that knows tenants")
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events`) + count(t, pool, `SELECT count(*) FROM webhook_deliveries`); n != 0 {
		t.Fatalf("the refused fan-out left %d events and deliveries", n)
	}

	// The same statement reaching acme's endpoint only is allowed, and its
	// event, written without a tenant, takes the row's.
	if _, err := pool.Exec(ctx, `WITH claimed AS (
		UPDATE webhook_outbox o SET status = 'dispatched', dispatched_at = now() WHERE o.id = $1 RETURNING o.id, o.event_type, o.payload
	), inserted AS (
		INSERT INTO webhook_events (id, event_type, payload, outbox_id) SELECT id, event_type, payload, id FROM claimed RETURNING id
	)
	INSERT INTO webhook_deliveries (event_id, endpoint_id, attempts, next_retry_at) SELECT id, $2, 1, now() FROM inserted`, row, acme.ID); err != nil {
		t.Fatalf("a fan-out to acme's endpoint: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE id = $1 AND tenant_id = 'acme'`, row); n != 1 {
		t.Fatalf("an event written without tenant_id did not take its row's")
	}
	// A replay's clone written without one takes its original's.
	var clone string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_events (event_type, payload, replay_of)
		SELECT event_type, payload, id FROM webhook_events WHERE id = $1 RETURNING id`, row).Scan(&clone); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at) VALUES ($1, $2, now())`, clone, globex.ID); !isGuard(err) {
		t.Fatalf("a replay of acme's event to globex's endpoint: %v, want the guard's check_violation", err)
	}
	// An event's tenant is its own: one inserted with a tenant keeps it.
	var theirs string
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_events (event_type, payload, tenant_id) VALUES ('invoice.paid', '{}', 'globex') RETURNING id`).Scan(&theirs); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, next_retry_at) VALUES ($1, $2, now()), ($1, $3, now())`,
		theirs, globex.ID, acme.ID); !isGuard(err) {
		t.Fatalf("globex's event to its endpoint and acme's in one statement: %v, want the guard's check_violation", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1`, theirs); n != 0 {
		t.Fatalf("the refused statement left %d deliveries", n)
	}
	// An endpoint's tenant is fixed: TenantScope checks whose an endpoint
	// is, then acts on it.
	for _, to := range []string{"'globex'", "NULL"} {
		var pgErr *pgconn.PgError
		_, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET tenant_id = `+to+` WHERE id = $1`, acme.ID)
		if !errors.As(err, &pgErr) || pgErr.ConstraintName != "webhook_endpoints_tenant_fixed" {
			t.Fatalf("moving acme's endpoint to tenant %s: %v, want webhook_endpoints_tenant_fixed's refusal", to, err)
		}
	}
}

// A tenant is checked where it enters: at most MaxTenantBytes of UTF-8
// without control characters, as the CHECKs hold plain SQL to.
func TestTenant_Format(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, tc := range []struct {
		tenant string
		ok     bool
	}{
		{"", true},
		{"acme", true},
		{"Acme GmbH / Zürich", true},
		{strings.Repeat("t", MaxTenantBytes), true},
		{strings.Repeat("t", MaxTenantBytes+1), false},
		{strings.Repeat("é", MaxTenantBytes/2+1), false},
		{"ac\nme", false},
		{"acme\x7f", false},
		{"acme\u0085", false},
		{"acme\xff", false},
	} {
		_, errEnqueue := enqueueEvent(t, pool, Event{Tenant: tc.tenant, Type: "invoice.paid", Payload: []byte(`{}`)})
		_, errCreate := CreateEndpoint(context.Background(), pool, Settings{}, EndpointParams{Tenant: tc.tenant, URL: "http://127.0.0.1:9/hooks"})
		if tc.ok != (errEnqueue == nil) || tc.ok != (errCreate == nil) {
			t.Errorf("tenant %q: enqueue %v, create endpoint %v; want ok = %v", tc.tenant, errEnqueue, errCreate, tc.ok)
		}
		if !tc.ok && (!errors.Is(errEnqueue, ErrInvalidEvent) || !errors.Is(errCreate, ErrInvalidEndpoint)) {
			t.Errorf("tenant %q: enqueue %v, create endpoint %v; want ErrInvalidEvent and ErrInvalidEndpoint", tc.tenant, errEnqueue, errCreate)
		}
	}
}
