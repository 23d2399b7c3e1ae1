-- +goose NO TRANSACTION
-- +goose Up
-- Claims that keep their speed on the database users have (see
-- docs/design/outbox-transport.md, Claim window and sweep).
--
-- 1. Every statement that names one row — a mark, a release, a requeue —
--    reads it by primary key, whatever the statistics say. Each claim
--    index is WHERE status = 'pending'; a mark's WHERE id = $1 AND status
--    = 'pending' implied that predicate, and when ANALYZE had last run
--    while nothing was pending the planner believed the index empty and
--    read all of it, filtering on id, instead of one primary-key probe:
--    every mark of a 20,000-row backlog read every pending row. So each
--    index below also says "the due column IS NOT NULL": true of every row
--    the claim takes (its due bound implies it), and implied by no
--    statement that names a row, so the planner cannot pick the index for
--    one. The failed-row indexes get the same for the requeues' WHERE id =
--    $1 AND status = 'failed' (their listings say created_at IS NOT NULL).
--
-- 2. webhook_deliveries' legacy rows (pending with NULL next_retry_at,
--    written before deliveries were born leased: see
--    docs/design/outbox-transport.md, Deliveries written before leases)
--    leave the claim index, whose scans are now ranges of due times; the claim's sweep moves them
--    into the window (internal/claim), found by an index of their own,
--    which is empty once the last of them is resolved.
--
-- Each index is built CONCURRENTLY, so enqueueing transactions are not
-- blocked while a table of millions of rows is read, and swapped in under
-- the old name. A run cut short is finished by running it again: the
-- statements are idempotent.

DROP INDEX CONCURRENTLY IF EXISTS email_outbox_claim_idx_v10;
CREATE INDEX CONCURRENTLY email_outbox_claim_idx_v10 ON email_outbox (next_attempt_at)
    WHERE status = 'pending' AND next_attempt_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS email_outbox_claim_idx;
ALTER INDEX email_outbox_claim_idx_v10 RENAME TO email_outbox_claim_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_claim_idx_v10;
CREATE INDEX CONCURRENTLY webhook_outbox_claim_idx_v10 ON webhook_outbox (next_attempt_at)
    WHERE status = 'pending' AND next_attempt_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_claim_idx;
ALTER INDEX webhook_outbox_claim_idx_v10 RENAME TO webhook_outbox_claim_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_claim_idx_v10;
CREATE INDEX CONCURRENTLY webhook_deliveries_claim_idx_v10 ON webhook_deliveries (next_retry_at)
    WHERE status = 'pending' AND next_retry_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_claim_idx;
ALTER INDEX webhook_deliveries_claim_idx_v10 RENAME TO webhook_deliveries_claim_idx;

CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_legacy_due_idx ON webhook_deliveries (created_at)
    WHERE status = 'pending' AND next_retry_at IS NULL;

DROP INDEX CONCURRENTLY IF EXISTS email_outbox_failed_idx_v10;
CREATE INDEX CONCURRENTLY email_outbox_failed_idx_v10 ON email_outbox (created_at DESC)
    WHERE status = 'failed' AND created_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS email_outbox_failed_idx;
ALTER INDEX email_outbox_failed_idx_v10 RENAME TO email_outbox_failed_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_failed_idx_v10;
CREATE INDEX CONCURRENTLY webhook_outbox_failed_idx_v10 ON webhook_outbox (created_at DESC)
    WHERE status = 'failed' AND created_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_failed_idx;
ALTER INDEX webhook_outbox_failed_idx_v10 RENAME TO webhook_outbox_failed_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_failed_idx_v10;
CREATE INDEX CONCURRENTLY webhook_deliveries_failed_idx_v10 ON webhook_deliveries (created_at DESC)
    WHERE status = 'failed' AND created_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_failed_idx;
ALTER INDEX webhook_deliveries_failed_idx_v10 RENAME TO webhook_deliveries_failed_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_legacy_due_idx;

DROP INDEX CONCURRENTLY IF EXISTS email_outbox_claim_idx_v9;
CREATE INDEX CONCURRENTLY email_outbox_claim_idx_v9 ON email_outbox (next_attempt_at) WHERE status = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS email_outbox_claim_idx;
ALTER INDEX email_outbox_claim_idx_v9 RENAME TO email_outbox_claim_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_claim_idx_v9;
CREATE INDEX CONCURRENTLY webhook_outbox_claim_idx_v9 ON webhook_outbox (next_attempt_at) WHERE status = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_claim_idx;
ALTER INDEX webhook_outbox_claim_idx_v9 RENAME TO webhook_outbox_claim_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_claim_idx_v9;
CREATE INDEX CONCURRENTLY webhook_deliveries_claim_idx_v9 ON webhook_deliveries (next_retry_at NULLS FIRST) WHERE status = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_claim_idx;
ALTER INDEX webhook_deliveries_claim_idx_v9 RENAME TO webhook_deliveries_claim_idx;

DROP INDEX CONCURRENTLY IF EXISTS email_outbox_failed_idx_v9;
CREATE INDEX CONCURRENTLY email_outbox_failed_idx_v9 ON email_outbox (created_at DESC) WHERE status = 'failed';
DROP INDEX CONCURRENTLY IF EXISTS email_outbox_failed_idx;
ALTER INDEX email_outbox_failed_idx_v9 RENAME TO email_outbox_failed_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_failed_idx_v9;
CREATE INDEX CONCURRENTLY webhook_outbox_failed_idx_v9 ON webhook_outbox (created_at DESC) WHERE status = 'failed';
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_failed_idx;
ALTER INDEX webhook_outbox_failed_idx_v9 RENAME TO webhook_outbox_failed_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_failed_idx_v9;
CREATE INDEX CONCURRENTLY webhook_deliveries_failed_idx_v9 ON webhook_deliveries (created_at DESC) WHERE status = 'failed';
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_failed_idx;
ALTER INDEX webhook_deliveries_failed_idx_v9 RENAME TO webhook_deliveries_failed_idx;
