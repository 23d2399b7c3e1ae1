package main

// Mutations of the tenant rule (webhook/tenant.go, migration 00030): an
// event reaches its own tenant's endpoints only, in the fan-out, at
// enqueue, for a plain-SQL row addressed elsewhere, and in the database
// for a statement that does not know the rule; idempotency keys are held
// per tenant.
func init() {
	const (
		pkg       = "./webhook/"
		migration = "migrations/sql/00030_webhook_tenants.sql"
	)
	register(
		Mutation{
			Name:    "tenants: the fan-out reaches every tenant's endpoints",
			File:    "webhook/fanout.go",
			Find:    "const reachesSQL = sameTenantSQL + ` AND ep.enabled AND CASE",
			Replace: "const reachesSQL = `ep.enabled AND CASE",
			Pkg:     pkg,
			Test:    "TestTenant_FanOutReachesOnlyItsOwn",
		},
		Mutation{
			Name:    "tenants: EnqueueEvent addresses another tenant's endpoint",
			File:    "webhook/tenant.go",
			Find:    "case (owner == nil && tenant == \"\") || (owner != nil && *owner == tenant):",
			Replace: "case true:",
			Pkg:     pkg,
			Test:    "TestTenant_AddressedToAnotherTenantsEndpoint",
		},
		Mutation{
			Name:    "tenants: the fan-out sends a plain-SQL row addressed to another tenant's endpoint",
			File:    "webhook/tenant.go",
			Find:    "WHERE x.id = o.endpoint_id AND coalesce(x.tenant_id, '') <> coalesce(o.tenant_id, '')))`",
			Replace: "WHERE x.id = o.endpoint_id AND false))`",
			Pkg:     pkg,
			Test:    "TestTenant_AddressedToAnotherTenantsEndpoint",
		},
		Mutation{
			Name:    "tenants: an idempotency key's holder is looked up across tenants",
			File:    "webhook/enqueue.go",
			Find:    "enqueueExistingSQL = `SELECT id FROM webhook_outbox WHERE idempotency_key = $1 AND coalesce(tenant_id, '') = $2`",
			Replace: "enqueueExistingSQL = `SELECT id FROM webhook_outbox WHERE idempotency_key = $1 AND $2::text IS NOT NULL`",
			Pkg:     pkg,
			Test:    "TestTenant_IdempotencyKeyPerTenant",
		},
		Mutation{
			Name:    "tenants: idempotency keys unique per key alone (the index ignores the tenant)",
			File:    migration,
			Find:    "ON webhook_outbox (tenant_id, idempotency_key) NULLS NOT DISTINCT WHERE idempotency_key IS NOT NULL;",
			Replace: "ON webhook_outbox (idempotency_key, (tenant_id IS NULL)) WHERE idempotency_key IS NOT NULL;",
			Pkg:     pkg,
			Test:    "TestTenant_IdempotencyKeyPerTenant",
		},
		Mutation{
			Name:    "tenants: the database lets a delivery cross tenants",
			File:    migration,
			Find:    "WHERE coalesce(e.tenant_id, '') <> coalesce(ep.tenant_id, '')",
			Replace: "WHERE false",
			Pkg:     pkg,
			Test:    "TestTenant_DatabaseRefusesACrossTenantDelivery",
		},
		Mutation{
			Name:    "tenants: an event written without a tenant does not take its row's",
			File:    migration,
			Find:    "SELECT tenant_id INTO NEW.tenant_id FROM webhook_outbox WHERE id = NEW.outbox_id;",
			Replace: "NULL;",
			Pkg:     pkg,
			Test:    "TestTenant_DatabaseRefusesACrossTenantDelivery",
		},
		Mutation{
			Name:    "tenants: a scoped call acts on another tenant's id",
			File:    "webhook/tenantscope.go",
			Find:    "	if !ok {\n		return fmt.Errorf(\"%w: %s %s\", ErrNotFound, kind, id)",
			Replace: "	if false {\n		return fmt.Errorf(\"%w: %s %s\", ErrNotFound, kind, id)",
			Pkg:     pkg,
			Test:    "TestTenantScope_ReachesOnlyItsOwnRows",
		},
		Mutation{
			Name:    "tenants: a tenant's list of endpoints holds every endpoint",
			File:    "webhook/endpoint.go",
			Find:    "FROM webhook_endpoints WHERE coalesce(tenant_id, '') = $1 ORDER BY created_at, id`",
			Replace: "FROM webhook_endpoints WHERE $1::text IS NOT NULL ORDER BY created_at, id`",
			Pkg:     pkg,
			Test:    "TestTenantScope_ReachesOnlyItsOwnRows",
		},
		Mutation{
			Name:    "tenants: a tenant's list of deliveries holds every delivery",
			File:    "webhook/tenantscope.go",
			Find:    "WHERE p.tenant_id = $1 AND ($2::uuid IS NULL",
			Replace: "WHERE $1::text IS NOT NULL AND ($2::uuid IS NULL",
			Pkg:     pkg,
			Test:    "TestTenantScope_ReachesOnlyItsOwnRows",
		},
		Mutation{
			Name:    "tenants: an endpoint's tenant can be changed",
			File:    migration,
			Find:    "FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)",
			Replace: "FOR EACH ROW WHEN (false)",
			Pkg:     pkg,
			Test:    "TestTenant_DatabaseRefusesACrossTenantDelivery",
		},
		Mutation{
			Name:    "tenants: worker show --tenant shows another tenant's row",
			File:    "cmd/worker/show.go",
			Find:    "if owner != scope.Tenant() {",
			Replace: "if owner == \"\\x00\" {",
			Pkg:     "./cmd/worker/",
			Test:    "TestEndpointsTenantReachesOnlyItsOwn",
		},
		Mutation{
			Name:    "tenants: the console's endpoints of a tenant list every endpoint",
			File:    "internal/operator/console/pages.go",
			Find:    "v.Endpoints, err = scope.ListEndpoints(ctx, c.db)",
			Replace: "v.Endpoints, err = webhook.ListEndpoints(ctx, c.db); _ = scope",
			Pkg:     "./internal/operator/console/",
			Test:    "TestPages",
		},
		Mutation{
			Name:    "tenants: an operator endpoint of a tenant stops the disable it would be told of",
			File:    "webhook/opsevents.go",
			Find:    "case errors.Is(err, ErrInvalidEvent):",
			Replace: "case errors.Is(err, ErrInvalidEvent) && false:",
			Pkg:     pkg,
			Test:    "TestBreaker_DisablesWithoutNoticeToATenantsOpsEndpoint",
		},
		Mutation{
			Name:    "tenants: every endpoint ever sent to keeps an in-flight series",
			File:    "webhook/metrics.go",
			Find:    "if g.n[endpointID]--; g.n[endpointID] <= 0 {\n\t\t\tdelete(g.n, endpointID)\n\t\t}",
			Replace: "g.n[endpointID]--",
			Pkg:     pkg,
			Test:    "TestMetrics",
		},
	)
}
