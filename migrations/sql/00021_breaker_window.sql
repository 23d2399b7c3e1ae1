-- +goose NO TRANSACTION
-- +goose Up
-- The webhook circuit breaker judges an endpoint by its failure rate over
-- a recent window instead of a streak of failures (webhook/breaker.go).
--
-- breaker_window_at is when the window began: the first failure after a
-- quiet spell, or the breaker's opening (then the counts are the half-open
-- trial's). breaker_requests and breaker_failures are the HTTP attempts
-- and the failed ones counted in it. A success on an endpoint with no
-- window, no failures and a closed breaker writes nothing, so the counts
-- exist only while an endpoint is failing; a success after the window
-- ended clears them. The CHECKs keep plain SQL to states the breaker can
-- reach: counts never negative, never more failures than requests, and
-- counts only with a window.
ALTER TABLE webhook_endpoints
    ADD COLUMN IF NOT EXISTS breaker_window_at timestamptz,
    ADD COLUMN IF NOT EXISTS breaker_requests  integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS breaker_failures  integer NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT IF EXISTS webhook_endpoints_breaker_counts_check,
    ADD CONSTRAINT webhook_endpoints_breaker_counts_check
        CHECK (breaker_failures >= 0 AND breaker_requests >= breaker_failures
            AND (breaker_requests = 0 OR breaker_window_at IS NOT NULL));

-- A half-open breaker's probes go first to deliveries that were attempted
-- and failed: this index finds an endpoint's such rows without reading its
-- history. A delivery enters it only once an attempt failed (last_error),
-- so deliveries to healthy endpoints never touch it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_probe_idx ON webhook_deliveries (endpoint_id, next_retry_at)
    WHERE status = 'pending' AND last_error IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_probe_idx;
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT IF EXISTS webhook_endpoints_breaker_counts_check,
    DROP COLUMN IF EXISTS breaker_window_at,
    DROP COLUMN IF EXISTS breaker_requests,
    DROP COLUMN IF EXISTS breaker_failures;
