package main

// Mutations of table ownership: each table's SQL lives in the package that
// owns it, and everyone else calls that package (docs/sqlowner_test.go).
func init() {
	register(
		Mutation{
			Name:    "sql owner: the demo counts email_outbox with SQL of its own again",
			File:    "internal/operator/demo/summary.go",
			Find:    "\tcounts, err := outbox.CountByKind(ctx, w.Pool)\n",
			Replace: "\tcounts, err := outbox.CountByKind(ctx, w.Pool)\n\t_, _ = w.Pool.Exec(ctx, `SELECT count(*) FROM email_outbox`)\n",
			Pkg:     "./docs/",
			Test:    "TestSQL_OnlyTheOwnerNamesItsTables",
		},
		Mutation{
			Name:    "sql owner: the history pass deletes webhook events itself",
			File:    "internal/engine/history/partitions.go",
			Find:    "const WebhookEvents Table = \"webhook_events\"",
			Replace: "const WebhookEvents Table = \"webhook_events\"\n\nconst pruneEventsSQL = `DELETE FROM webhook_events WHERE created_at < now() - $1::interval`",
			Pkg:     "./docs/",
			Test:    "TestSQL_OnlyTheOwnerNamesItsTables",
		},
	)
}
