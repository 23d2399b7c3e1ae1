package main

// Mutations of the event-type catalog (webhook/eventtype.go, schema.go,
// migration 00031): a payload that fails its type's schema is refused at
// enqueue — before the statement, and after it when the catalog changed —
// and failed, never sent, by the fan-out; a schema that cannot be checked
// holds its rows; subscriptions stay within the catalog.
func init() {
	const (
		pkg       = "./webhook/"
		migration = "migrations/sql/00031_webhook_event_types.sql"
	)
	register(
		Mutation{
			Name:    "event types: EnqueueEvent does not check the schema it knows",
			File:    "webhook/enqueue.go",
			Find:    "err := schemas.check(ctx, tx, eventType, digest, payload)\n\tif err == nil {",
			Replace: "var err error\n\tif err == nil {",
			Pkg:     pkg,
			Test:    "TestEventTypes_SchemaRefusesAtEnqueueAndFailsAtFanOut",
		},
		Mutation{
			Name:    "event types: EnqueueEvent keeps a row its statement found under a changed schema",
			File:    "webhook/enqueue.go",
			Find:    "if err == nil && digest != checked {",
			Replace: "if false && err == nil && digest != checked {",
			Pkg:     pkg,
			Test:    "TestEventTypes_SchemaRefusesAtEnqueueAndFailsAtFanOut",
		},
		Mutation{
			Name:    "event types: the fan-out sends plain-SQL rows unchecked",
			File:    "webhook/outbox.go",
			Find:    "coalesce((SELECT t.schema_digest FROM webhook_event_types t WHERE t.name = o.event_type), '') <> coalesce(` + checked + `, '') AS unchecked",
			Replace: "false AS unchecked",
			Pkg:     pkg,
			Test:    "TestEventTypes_SchemaRefusesAtEnqueueAndFailsAtFanOut",
		},
		Mutation{
			Name:    "event types: a payload failing its schema is retried, not failed",
			File:    "webhook/outbox.go",
			Find:    "case errors.Is(err, ErrPayloadSchema) || errors.Is(err, ErrInvalidPayload):\n\t\t\t\tt.Add(p.markOutboxFailure(ctx, u.row, err, true))",
			Replace: "case errors.Is(err, ErrPayloadSchema) || errors.Is(err, ErrInvalidPayload):\n\t\t\t\tt.Add(p.markOutboxFailure(ctx, u.row, err, false))",
			Pkg:     pkg,
			Test:    "TestEventTypes_SchemaRefusesAtEnqueueAndFailsAtFanOut",
		},
		Mutation{
			Name:    "event types: a schema that does not compile fails its rows for good",
			File:    "webhook/outbox.go",
			Find:    "\t\t\tdefault:\n\t\t\t\tt.Add(p.markOutboxFailure(ctx, u.row, err, false))",
			Replace: "\t\t\tdefault:\n\t\t\t\tt.Add(p.markOutboxFailure(ctx, u.row, err, true))",
			Pkg:     pkg,
			Test:    "TestEventTypes_SchemaThatDoesNotCompileHoldsRows",
		},
		Mutation{
			Name:    "event types: a schema may load files and URLs",
			File:    "webhook/schema.go",
			Find:    "\tc.UseLoader(selfContained{})\n",
			Replace: "",
			Pkg:     pkg,
			Test:    "TestLoadEventTypes",
		},
		Mutation{
			Name:    "event types: an endpoint subscribes to a typo without a suggestion",
			File:    "webhook/eventtype.go",
			Find:    "if !slices.Contains(catalog, t) {",
			Replace: "if false {",
			Pkg:     pkg,
			Test:    "TestEventTypes_SubscriptionsOnlyToCatalogTypes",
		},
		Mutation{
			Name:    "event types: plain SQL subscribes an endpoint outside the catalog",
			File:    migration,
			Find:    "    FOR EACH ROW WHEN (cardinality(NEW.event_types) > 0)\n    EXECUTE FUNCTION webhook_endpoints_subscribed();",
			Replace: "    FOR EACH ROW WHEN (false)\n    EXECUTE FUNCTION webhook_endpoints_subscribed();",
			Pkg:     pkg,
			Test:    "TestEventTypes_SubscriptionsOnlyToCatalogTypes",
		},
		Mutation{
			Name:    "event types: a sync removes a subscribed type",
			File:    migration,
			Find:    "CREATE TRIGGER webhook_event_types_subscribed AFTER INSERT OR UPDATE OR DELETE ON webhook_event_types",
			Replace: "CREATE TRIGGER webhook_event_types_subscribed AFTER TRUNCATE ON webhook_event_types",
			Pkg:     pkg,
			Test:    "TestEventTypes_SubscriptionsOnlyToCatalogTypes",
		},
		Mutation{
			Name:    "event types: a sync rewrites what did not change",
			File:    "webhook/eventtype.go",
			Find:    "WHERE (t.description, t.schema, t.example, t.deprecated) IS DISTINCT FROM",
			Replace: "WHERE true OR (t.description, t.schema, t.example, t.deprecated) IS DISTINCT FROM",
			Pkg:     pkg,
			Test:    "TestEventTypes_SyncAndDeprecated",
		},
	)
}
