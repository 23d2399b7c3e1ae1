-- +goose Up
-- Serve the operator's failed-row views and the failed gauges without
-- scanning tables that only grow (email rows are never deleted; events and
-- deliveries are the replayable record).
CREATE INDEX webhook_outbox_failed_idx ON webhook_outbox (created_at DESC) WHERE status = 'failed';
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (created_at DESC) WHERE status = 'failed';

-- +goose Down
DROP INDEX webhook_deliveries_failed_idx;
DROP INDEX webhook_outbox_failed_idx;
