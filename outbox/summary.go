package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// KindCount is how many rows of one kind are in one status, and how many
// of those were attempted more than once.
type KindCount struct {
	Kind    Kind
	Status  Status
	Rows    int
	Retried int
}

// CountByKind counts every row by kind and status, in that order. It
// reads the whole table: a report's (worker demo), not a scrape's.
func CountByKind(ctx context.Context, db DB) ([]KindCount, error) {
	rows, err := db.Query(ctx, `SELECT kind, status, count(*), count(*) FILTER (WHERE attempts > 1)
		FROM email_outbox GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("outbox: count by kind: %w", err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[KindCount])
	if err != nil {
		return nil, fmt.Errorf("outbox: count by kind: %w", err)
	}
	return counts, nil
}

// SecretsLeft is what scrubbing left of the secret payload fields
// (SecretPayloadKeys): of the Sent rows (dispatched or skipped),
// SentHolding still hold one, which should be none; FailedKeys are those
// the failed rows keep, so that a requeue sends them whole.
type SecretsLeft struct {
	Sent        int
	SentHolding int
	FailedKeys  []string
}

// CountSecretsLeft reads SecretsLeft. It reads the whole table: a
// report's (worker demo), not a scrape's.
func CountSecretsLeft(ctx context.Context, db DB) (SecretsLeft, error) {
	keys := SecretPayloadKeys()
	var s SecretsLeft
	if err := db.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE status IN ('dispatched', 'skipped') AND payload ?| $1),
		count(*) FILTER (WHERE status IN ('dispatched', 'skipped'))
		FROM email_outbox`, keys).Scan(&s.SentHolding, &s.Sent); err != nil {
		return s, fmt.Errorf("outbox: count secrets left: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT COALESCE(array_agg(DISTINCT k ORDER BY k), '{}')
		FROM email_outbox, jsonb_object_keys(payload) k WHERE status = 'failed' AND k = ANY($1)`,
		keys).Scan(&s.FailedKeys); err != nil {
		return s, fmt.Errorf("outbox: count secrets left: %w", err)
	}
	return s, nil
}
