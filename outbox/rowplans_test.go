package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestRowStatements_ReadThePrimaryKeyWhateverTheStatistics locks every
// statement that names email_outbox rows by id to a primary-key lookup on
// a table whose statistics say nothing is pending or failed while
// thousands are: the state between two ANALYZEs in which a backlog arrives
// on a table of sent mail. With the claim index's predicate as it was
// (status = 'pending' alone), the planner read that whole index, filtering
// on id, for every mark.
func TestRowStatements_ReadThePrimaryKeyWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, sql := range []string{
		`INSERT INTO email_outbox (customer_id, payload, status, dispatched_at)
SELECT 'cus', '{"to":"a@example.com","subject":"s","text":"t"}', 'dispatched', now() FROM generate_series(1, 20000)`,
		`ANALYZE email_outbox`,
		`INSERT INTO email_outbox (customer_id, payload, status)
SELECT 'cus', '{"to":"a@example.com","subject":"s","text":"t"}', CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'pending' END
FROM generate_series(1, 6000) i`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var id string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM email_outbox WHERE status = 'pending' LIMIT 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	const name = "email_outbox"
	pgtest.RequireKeyLookups(t, pool, []pgtest.Statement{
		{Name: "dispatched mark", Table: name, SQL: markDispatchedSQL, Args: []any{id, 1}},
		{Name: "skipped mark", Table: name, SQL: markSkippedSQL, Args: []any{id, 1}},
		{Name: "failed mark", Table: name, SQL: markFailedSQL, Args: []any{id, "e", "{}", 1}},
		{Name: "retry mark", Table: name, SQL: markRetrySQL, Args: []any{id, time.Minute, "e", "{}", 1}},
		{Name: "release", Table: name, SQL: table.ReleaseSQL(), Args: []any{[]string{id}}},
		{Name: "landed", Table: name, SQL: table.LandedSQL(), Args: []any{id}},
		{Name: "requeue", Table: name, SQL: requeueSQL, Args: []any{id, "test"}},
		{Name: "rekey", Table: name, SQL: rekeyUpdateSQL, Args: []any{id, "{}", "pending", "{}"}},
	})
}
