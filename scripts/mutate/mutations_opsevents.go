package main

// Mutations of the operational events (webhook/opsevents.go): what the
// operator endpoint is told — endpoint.disabled, endpoint.recovered,
// delivery.exhausted — once each, with the tenant, and never of itself;
// and a mark that tells nothing costs nothing.
func init() {
	const pkg = "./webhook/"
	register(
		Mutation{
			Name:    "opsevents: delivery.exhausted never enqueued",
			File:    "webhook/opsevents.go",
			Find:    "WHERE $7 = 'failed' AND NOT EXISTS (SELECT FROM ops_endpoint WHERE refused)",
			Replace: "WHERE false AND NOT EXISTS (SELECT FROM ops_endpoint WHERE refused)",
			Pkg:     pkg,
			Test:    "TestOpsEvents_DeliveryExhaustedTellsTheOperator",
		},
		Mutation{
			Name:    "opsevents: a mark that fails a delivery for good carries no notice",
			File:    "webhook/mark.go",
			Find:    "b != nil && r.Outcome == OutcomeFailed && b.settings.notifies(b.endpointID)",
			Replace: "b != nil && false && b.settings.notifies(b.endpointID)",
			Pkg:     pkg,
			Test:    "TestOpsEvents_PermanentFailuresTellTheOperator",
		},
		Mutation{
			Name:    "opsevents: every mark carries the notice's statement, operator endpoint or none",
			File:    "webhook/mark.go",
			Find:    "b != nil && r.Outcome == OutcomeFailed && b.settings.notifies(b.endpointID)",
			Replace: "b != nil",
			Pkg:     pkg,
			Test:    "TestOpsEvents_NoneWithoutAnOperatorEndpoint",
		},
		Mutation{
			Name:    "opsevents: the operator endpoint is told of its own failures",
			File:    "webhook/opsevents.go",
			Find:    "return s.OpsEndpointID != \"\" && s.OpsEndpointID != endpointID",
			Replace: "return s.OpsEndpointID != \"\"",
			Pkg:     pkg,
			Test:    "TestOpsEvents_OperatorEndpointFailuresAreNotToldToItself",
		},
		Mutation{
			Name:    "opsevents: delivery.exhausted enqueued to an operator endpoint of a tenant",
			File:    "webhook/opsevents.go",
			Find:    "NOT EXISTS (SELECT FROM ops_endpoint WHERE refused)",
			Replace: "true",
			Pkg:     pkg,
			Test:    "TestOpsEvents_NoneToAnOperatorEndpointOfATenant",
		},
		Mutation{
			Name:    "opsevents: a delivery.exhausted refused is not logged",
			File:    "webhook/opsevents.go",
			Find:    "AND $7 = 'failed' AND EXISTS (SELECT FROM ops_endpoint WHERE refused)`",
			Replace: "AND false`",
			Pkg:     pkg,
			Test:    "TestOpsEvents_NoneToAnOperatorEndpointOfATenant",
		},
		Mutation{
			Name:    "opsevents: delivery.exhausted without the tenant",
			File:    "webhook/opsevents.go",
			Find:    "jsonb_build_object('tenant', coalesce(ep.tenant_id, '')",
			Replace: "jsonb_build_object('tenant', ''",
			Pkg:     pkg,
			Test:    "TestOpsEvents_DeliveryExhaustedTellsTheOperator",
		},
		Mutation{
			Name:    "opsevents: a requeued delivery that fails again is not told (the key names the delivery and its attempts alone)",
			File:    "webhook/opsevents.go",
			Find:    " || ':' || (extract(epoch FROM now()) * 1000000)::bigint",
			Replace: "",
			Pkg:     pkg,
			Test:    "TestOpsEvents_DeliveryExhaustedTellsTheOperator",
		},
		Mutation{
			Name:    "opsevents: delivery.exhausted told by a stale mark too (not read from the compare-and-set's rows)",
			File:    "webhook/opsevents.go",
			Find:    "FROM marked m JOIN webhook_deliveries x ON x.id = m.id",
			Replace: "FROM (SELECT $1::uuid AS id) m JOIN webhook_deliveries x ON x.id = m.id",
			Pkg:     pkg,
			Test:    "TestOpsEvents_StaleFailureMarkTellsNothing",
		},
		Mutation{
			Name:    "opsevents: endpoint.recovered without the tenant",
			File:    "webhook/opsevents.go",
			Find:    "const recoveredSQL = `SELECT url, coalesce(tenant_id, ''), now()",
			Replace: "const recoveredSQL = `SELECT url, '', now()",
			Pkg:     pkg,
			Test:    "TestOpsEvents_EndpointRecoveredOncePerRecovery",
		},
		Mutation{
			Name:    "opsevents: endpoint.recovered never sent",
			File:    "webhook/breaker.go",
			Find:    "p.notifyRecovered(ctx, d, b.closedPause, log)",
			Replace: "_, _ = ctx, b.closedPause",
			Pkg:     pkg,
			Test:    "TestOpsEvents_EndpointRecoveredOncePerRecovery",
		},
		Mutation{
			Name:    "opsevents: endpoint.recovered once per endpoint, not per recovery",
			File:    "webhook/opsevents.go",
			Find:    "key := EventEndpointRecovered + \":\" + d.endpointID + \":\" + n.PausedAt.UTC().Format(time.RFC3339Nano)",
			Replace: "key := EventEndpointRecovered + \":\" + d.endpointID",
			Pkg:     pkg,
			Test:    "TestOpsEvents_EndpointRecoveredOncePerRecovery",
		},
		Mutation{
			Name:    "opsevents: a 410 disables without endpoint.disabled",
			File:    "webhook/attempt.go",
			Find:    "if _, ok := p.disable(ctx, d, log, DisabledGone, reason, disableGoneSQL); ok {",
			Replace: "if _, err := p.pool.Exec(ctx, disableGoneSQL, d.endpointID, reason); err == nil {",
			Pkg:     pkg,
			Test:    "TestOpsEvents_PermanentFailuresTellTheOperator",
		},
		Mutation{
			Name:    "opsevents: endpoint.disabled after a 410 without the tenant",
			File:    "webhook/attempt.go",
			Find:    "RETURNING url, coalesce(tenant_id, ''), failing_since",
			Replace: "RETURNING url, '', failing_since",
			Pkg:     pkg,
			Test:    "TestOpsEvents_PermanentFailuresTellTheOperator",
		},
	)
}
