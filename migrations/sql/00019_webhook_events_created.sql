-- +goose NO TRANSACTION
-- +goose Up
-- The history pass deletes webhook events past WEBHOOK_HISTORY_RETENTION
-- oldest first (migration 00018, internal/history): this index is how it
-- finds them without reading the table. Built CONCURRENTLY, so fan-outs
-- go on inserting events while it builds on a table of months.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_created_idx ON webhook_events (created_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_created_idx;
