package main

// Mutations of issue 15's webhook controls: idempotent enqueue on both
// outboxes, the pool-wide rate limit, the circuit breaker and auto-disable,
// secret rotation. Each names the test that must turn red.
func init() {
	register(
		// Idempotent enqueue.
		Mutation{
			Name:    "idempotency email: no ON CONFLICT (a duplicate key errors)",
			File:    "outbox/enqueue.go",
			Find:    "ON CONFLICT (customer_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING\nRETURNING id`",
			Replace: "RETURNING id`",
			Pkg:     "./outbox/",
			Test:    "TestEnqueue_IdempotencyKeyConcurrent",
		},
		Mutation{
			Name:    "idempotency email: a duplicate returns a fresh id, not the holder's",
			File:    "outbox/enqueue.go",
			Find:    "if err := tx.QueryRow(ctx, enqueueExistingSQL, email.CustomerID, email.IdempotencyKey).Scan(&id); err != nil {",
			Replace: "if err := tx.QueryRow(ctx, `SELECT $1::text, $2::text`, email.CustomerID, email.IdempotencyKey).Scan(&id, new(string)); err != nil {",
			Pkg:     "./outbox/",
			Test:    "TestEnqueue_IdempotencyKeyConcurrent",
		},
		Mutation{
			Name:    "idempotency webhook: no ON CONFLICT (a duplicate key errors)",
			File:    "webhook/enqueue.go",
			Find:    "ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING\nRETURNING id`",
			Replace: "RETURNING id`",
			Pkg:     "./webhook/",
			Test:    "TestEnqueue_IdempotencyKeyConcurrent",
		},
		Mutation{
			Name:    "idempotency webhook: a duplicate is read from the caller's stale view",
			File:    "webhook/enqueue.go",
			Find:    "enqueueExistingSQL = `SELECT id FROM webhook_outbox WHERE idempotency_key = $1`",
			Replace: "enqueueExistingSQL = `SELECT gen_random_uuid()::text WHERE $1::text IS NOT NULL`",
			Pkg:     "./webhook/",
			Test:    "TestEnqueue_IdempotencyKeyConcurrent",
		},
	)
}
