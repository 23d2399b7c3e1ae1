package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// A tenant is whose an endpoint and an event are: the application's own
// name for its customer ("acme", a customer id), set on both
// (EndpointParams.Tenant, Event.Tenant, or tenant_id in plain SQL) and
// matched exactly. An event of a tenant reaches only that tenant's
// endpoints; an event without one reaches only endpoints without one,
// which is how an installation that never names a tenant works. Migration
// 00030 holds the same rule in the database, for a statement that does not
// know it.

// MaxTenantBytes bounds a tenant, as the CHECKs webhook_outbox_tenant_id_format
// and webhook_endpoints_tenant_id_format do for plain SQL.
const MaxTenantBytes = 255

// validateTenant refuses a tenant the CHECKs would, with an error that
// names it. "" is no tenant.
func validateTenant(tenant string) error {
	if tenant == "" {
		return nil
	}
	if len(tenant) > MaxTenantBytes || !utf8.ValidString(tenant) || strings.ContainsFunc(tenant, isControl) {
		return fmt.Errorf("tenant %q must be at most %d bytes of UTF-8 without control characters", tenant, MaxTenantBytes)
	}
	return nil
}

// isControl is the CHECKs' class: C0, DEL and C1.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// sameTenantSQL is whether endpoint ep belongs to event ev's tenant; the
// empty string is never a tenant, so it stands for none, and the index
// webhook_endpoints_tenant_idx serves the match.
const sameTenantSQL = `coalesce(ep.tenant_id, '') = coalesce(ev.tenant_id, '')`

// misaddressedSQL is whether webhook_outbox row o is addressed to an
// endpoint of another tenant than its own — written by plain SQL, which
// EnqueueEvent's check does not see. The fan-out marks it failed with
// misaddressedError and makes no event.
const misaddressedSQL = `(o.endpoint_id IS NOT NULL AND EXISTS (SELECT 1 FROM webhook_endpoints x
		WHERE x.id = o.endpoint_id AND coalesce(x.tenant_id, '') <> coalesce(o.tenant_id, '')))`

// misaddressedError is the last_error of a misaddressed row.
const misaddressedError = `'addressed to endpoint ' || o.endpoint_id || ', which is not one of its tenant''s endpoints: not sent'`

// checkAddressee refuses an event of tenant addressed to endpointID when
// the endpoint belongs to another tenant (or, for a tenant's event, does
// not exist): what the fan-out would mark failed, refused in the
// application's transaction instead. The error names neither the
// endpoint's tenant nor whether it exists elsewhere.
func checkAddressee(ctx context.Context, tx pgx.Tx, tenant, endpointID string) error {
	var owner *string
	err := tx.QueryRow(ctx, `SELECT tenant_id FROM webhook_endpoints WHERE id = $1`, endpointID).Scan(&owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if tenant == "" {
			return nil // as before tenants: an address no endpoint holds yet fans out to nothing
		}
	case err != nil:
		return fmt.Errorf("webhook: enqueue: read endpoint %s: %w", endpointID, err)
	case (owner == nil && tenant == "") || (owner != nil && *owner == tenant):
		return nil
	}
	if tenant == "" {
		return fmt.Errorf("%w: endpoint %s belongs to a tenant; an event without one cannot be addressed to it", ErrInvalidEvent, endpointID)
	}
	return fmt.Errorf("%w: endpoint %s is not one of tenant %q's endpoints", ErrInvalidEvent, endpointID, tenant)
}
