-- +goose Up
-- After the webhook circuit breaker closes, first attempts go out in a
-- slow start (webhook/breaker.go, "recovering"): only as many at once as
-- could all fail without the window's failed share reaching the opening
-- rate. Without it, the deliveries held while the breaker was open went
-- out together the moment it closed; to an endpoint that fails every first
-- attempt and accepts the retry, they all failed and reopened it, and in
-- 120 s it received 21 of 300 messages.
--
-- breaker_recovering is that phase: set by the success that closes the
-- breaker, cleared by the success that finds the window's failed share
-- under half the opening rate, or by a reopening. A tripped breaker is
-- not recovering.
ALTER TABLE webhook_endpoints
    ADD COLUMN IF NOT EXISTS breaker_recovering boolean NOT NULL DEFAULT false;
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT IF EXISTS webhook_endpoints_breaker_recovering_check,
    ADD CONSTRAINT webhook_endpoints_breaker_recovering_check
        CHECK (NOT (breaker_recovering AND paused_until IS NOT NULL));

-- +goose Down
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT IF EXISTS webhook_endpoints_breaker_recovering_check,
    DROP COLUMN IF EXISTS breaker_recovering;
