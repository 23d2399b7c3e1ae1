package webhook

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// Every call of a tenant's scope, given ids of another tenant's rows and
// of rows without a tenant, answers ErrNotFound and changes nothing; given
// its own, it does what the operator's call does. The list of calls is the
// type's own method set, so a call added without a case here fails.
func TestTenantScope_ReachesOnlyItsOwnRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	acmeEP, rcAcme := tenantEndpoint(t, pool, "acme")
	globexEP, rcGlobex := tenantEndpoint(t, pool, "globex")
	noneEP, _ := tenantEndpoint(t, pool, "")
	enqueue := func(tenant string) string {
		t.Helper()
		id, err := enqueueEvent(t, pool, Event{Tenant: tenant, Type: "invoice.paid", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	acmeEvent, globexEvent, noneEvent := enqueue("acme"), enqueue("globex"), enqueue("")
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	deliveryTo := func(endpointID string) string {
		return oneDelivery(t, pool, "endpoint_id = $1", endpointID).ID
	}
	acmeDelivery, globexDelivery, noneDelivery := deliveryTo(acmeEP.ID), deliveryTo(globexEP.ID), deliveryTo(noneEP.ID)
	// Every delivery failed, so recovering finds something everywhere.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'failed', last_error = 'HTTP 500'`); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Hour)
	acme, err := ForTenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	// What another tenant's rows look like, read again after each call.
	snapshot := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(concat_ws('|', id, tenant_id, url, secret, event_types, enabled, disabled_reason), ';' ORDER BY id)
			|| (SELECT count(*) FROM webhook_events)::text || (SELECT count(*) FROM webhook_deliveries)::text
			FROM webhook_endpoints WHERE id <> $1`, acmeEP.ID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	url := "http://127.0.0.1:9/moved"
	others := []struct{ endpoint, event, delivery string }{
		{globexEP.ID, globexEvent, globexDelivery},
		{noneEP.ID, noneEvent, noneDelivery},
	}
	type call func(endpoint, event, delivery string) error
	calls := map[string]call{
		"CreateEndpoint": func(string, string, string) error {
			_, err := acme.CreateEndpoint(ctx, pool, Settings{}, EndpointParams{Tenant: "globex", URL: url})
			if errors.Is(err, ErrInvalidEndpoint) {
				return ErrNotFound // refused, as the others are
			}
			return err
		},
		"ListEndpoints": func(string, string, string) error {
			eps, err := acme.ListEndpoints(ctx, pool)
			if err != nil || len(eps) != 1 || eps[0].ID != acmeEP.ID {
				t.Errorf("ListEndpoints = %v, %v; want acme's one endpoint", eps, err)
			}
			return ErrNotFound
		},
		"GetEndpoint": func(ep, _, _ string) error { _, err := acme.GetEndpoint(ctx, pool, ep); return err },
		"UpdateEndpoint": func(ep, _, _ string) error {
			_, err := acme.UpdateEndpoint(ctx, pool, Settings{}, ep, EndpointUpdate{URL: &url, EventTypes: &[]string{"x.y"}})
			return err
		},
		"DisableEndpoint": func(ep, _, _ string) error { return acme.DisableEndpoint(ctx, pool, ep, "no") },
		"EnableEndpoint":  func(ep, _, _ string) error { return acme.EnableEndpoint(ctx, pool, ep) },
		"DeleteEndpoint":  func(ep, _, _ string) error { return acme.DeleteEndpoint(ctx, pool, ep) },
		"RotateSecret": func(ep, _, _ string) error {
			_, err := acme.RotateSecret(ctx, pool, ep, "", time.Hour)
			return err
		},
		"EndpointHealth": func(ep, _, _ string) error { _, err := acme.EndpointHealth(ctx, pool, ep); return err },
		"SendTestEvent": func(ep, _, _ string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := acme.SendTestEvent(ctx, tx, Settings{}, ep, TestEventType)
				return err
			})
		},
		"EndpointSecret": func(ep, _, _ string) error {
			secret, err := acme.EndpointSecret(ctx, pool, ep)
			if secret != "" {
				t.Errorf("EndpointSecret of another's endpoint %s returned a secret", ep)
			}
			return err
		},
		"GetEvent":    func(_, ev, _ string) error { _, err := acme.GetEvent(ctx, pool, ev); return err },
		"GetDelivery": func(_, _, d string) error { _, err := acme.GetDelivery(ctx, pool, d); return err },
		"ListDeliveries": func(ep, _, d string) error {
			ds, err := acme.ListDeliveries(ctx, pool, DeliveryQuery{})
			if err != nil || len(ds) != 1 || ds[0].ID != acmeDelivery {
				t.Errorf("ListDeliveries = %v, %v; want acme's one delivery", ds, err)
			}
			if _, err := acme.ListDeliveries(ctx, pool, DeliveryQuery{EndpointID: ep}); !errors.Is(err, ErrNotFound) {
				return err
			}
			_, err = acme.ListDeliveries(ctx, pool, DeliveryQuery{Before: d})
			return err
		},
		"ReplayTargets": func(_, ev, _ string) error { _, err := acme.ReplayTargets(ctx, pool, ev); return err },
		"ReplayEvent":   func(_, ev, _ string) error { _, err := acme.ReplayEvent(ctx, p, ev); return err },
		"ReplayFailedSince": func(ep, _, _ string) error {
			_, err := acme.ReplayFailedSince(ctx, p, ep, since)
			return err
		},
		"RecoverSince": nil, // below: it takes no id, and recovers acme's own
		"Tenant":       nil,
	}
	scope := reflect.TypeOf(acme)
	for i := range scope.NumMethod() {
		if _, ok := calls[scope.Method(i).Name]; !ok {
			t.Errorf("TenantScope.%s has no case here", scope.Method(i).Name)
		}
	}
	for _, other := range others {
		for name, c := range calls {
			if c == nil {
				continue
			}
			before := snapshot()
			if err := c(other.endpoint, other.event, other.delivery); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s with another's ids (endpoint %s): %v, want ErrNotFound", name, other.endpoint, err)
			}
			if after := snapshot(); after != before {
				t.Errorf("%s with another's ids changed their rows:\n%s\n%s", name, before, after)
			}
		}
	}

	// Its own rows: each call works.
	before := len(rcAcme.requests())
	rb, err := acme.RecoverSince(ctx, p, since)
	if err != nil || rb.Deliveries != 1 || len(rcAcme.requests()) != before+1 || len(rcGlobex.requests()) != 1 {
		t.Fatalf("RecoverSince: %+v, %v; acme's endpoint got %d more requests, globex's %d in all; want acme's one failed event, once",
			rb, err, len(rcAcme.requests())-before, len(rcGlobex.requests()))
	}
	if _, err := acme.GetEvent(ctx, pool, acmeEvent); err != nil {
		t.Errorf("GetEvent of its own: %v", err)
	}
	if d, err := acme.GetDelivery(ctx, pool, acmeDelivery); err != nil || len(d.Log) == 0 {
		t.Errorf("GetDelivery of its own: %+v, %v; want it with its attempt log", d, err)
	}
	if rep, err := acme.ReplayEvent(ctx, p, acmeEvent); err != nil || rep.Deliveries != 1 {
		t.Errorf("ReplayEvent of its own: %+v, %v", rep, err)
	}
	ep, err := acme.UpdateEndpoint(ctx, pool, Settings{}, acmeEP.ID, EndpointUpdate{EventTypes: &[]string{"invoice.paid", "invoice.paid"}})
	if err != nil || ep.Tenant != "acme" || ep.URL != acmeEP.URL || !slices.Equal(ep.EventTypes, []string{"invoice.paid"}) {
		t.Errorf("UpdateEndpoint of its own: %+v, %v", ep, err)
	}
	if err := acme.DisableEndpoint(ctx, pool, acmeEP.ID, ""); err != nil {
		t.Error(err)
	}
	if err := acme.EnableEndpoint(ctx, pool, acmeEP.ID); err != nil {
		t.Error(err)
	}
	rot, err := acme.RotateSecret(ctx, pool, acmeEP.ID, "", 0)
	if err != nil {
		t.Error(err)
	}
	if secret, err := acme.EndpointSecret(ctx, pool, acmeEP.ID); err != nil || secret != rot.Secret {
		t.Errorf("EndpointSecret of its own after a rotation: %v; want the new secret", err)
	}
	if err := acme.DeleteEndpoint(ctx, pool, acmeEP.ID); err != nil {
		t.Error(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints WHERE id = $1`, acmeEP.ID); n != 0 {
		t.Errorf("DeleteEndpoint of its own left it")
	}
	if _, err := ForTenant(""); err == nil {
		t.Errorf("ForTenant(\"\") is a scope; rows without a tenant are the operator's")
	}
}

// A tenant's delivery list filters by type and time, and pages by cursor:
// the last delivery of a page asks for the next, and pages neither repeat
// nor skip a delivery.
func TestTenantScope_ListDeliveriesFiltersAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	tenantEndpoint(t, pool, "acme")
	for _, typ := range []string{"invoice.paid", "invoice.voided", "invoice.paid", "invoice.paid", "invoice.voided"} {
		if _, err := enqueueEvent(t, pool, Event{Tenant: "acme", Type: typ, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	acme, err := ForTenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	all, err := acme.ListDeliveries(ctx, pool, DeliveryQuery{})
	if err != nil || len(all) != 5 {
		t.Fatalf("all: %d, %v; want 5", len(all), err)
	}
	var paged []string
	before := ""
	for range 10 {
		page, err := acme.ListDeliveries(ctx, pool, DeliveryQuery{Limit: 2, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page {
			paged = append(paged, d.ID)
		}
		if len(page) < 2 {
			break
		}
		before = page[len(page)-1].ID
	}
	var want []string
	for _, d := range all {
		want = append(want, d.ID)
	}
	if !slices.Equal(paged, want) {
		t.Errorf("pages of 2 gave %v, want %v", paged, want)
	}
	paid, err := acme.ListDeliveries(ctx, pool, DeliveryQuery{EventType: "invoice.paid"})
	if err != nil || len(paid) != 3 || paid[0].EventType != "invoice.paid" {
		t.Errorf("invoice.paid: %d, %v; want 3", len(paid), err)
	}
	if later, err := acme.ListDeliveries(ctx, pool, DeliveryQuery{Since: time.Now().Add(time.Hour)}); err != nil || len(later) != 0 {
		t.Errorf("since an hour from now: %d, %v; want none", len(later), err)
	}
	if earlier, err := acme.ListDeliveries(ctx, pool, DeliveryQuery{Since: time.Now().Add(-time.Hour)}); err != nil || len(earlier) != 5 {
		t.Errorf("since an hour ago: %d, %v; want 5", len(earlier), err)
	}
}
