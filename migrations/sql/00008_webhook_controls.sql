-- +goose Up
-- Issue 15: per-endpoint rate limits, circuit breaker and auto-disable,
-- secret rotation, idempotent enqueue on both outboxes.
--
-- Every new column is nullable or has a constant default, so adding it
-- rewrites no table. The CHECK constraints are the Go API's bounds; plain
-- SQL meets the same rules.

-- Idempotent enqueue. A key is optional; where given it is unique — per
-- customer for email, across the table for webhooks — so a second INSERT
-- with the same key is a conflict that ON CONFLICT DO NOTHING turns into
-- "already enqueued". The partial unique indexes are the arbiters that
-- ON CONFLICT names (see README, "Idempotent enqueue"). Keys are held as
-- long as the row is: pruning a dispatched webhook_outbox row (after
-- WEBHOOK_OUTBOX_RETENTION) frees its key.
ALTER TABLE email_outbox ADD COLUMN idempotency_key text;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_idempotency_key_format
    CHECK (idempotency_key <> '' AND octet_length(idempotency_key) <= 255);
CREATE UNIQUE INDEX email_outbox_idempotency_idx ON email_outbox (customer_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE webhook_outbox ADD COLUMN idempotency_key text;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_idempotency_key_format
    CHECK (idempotency_key <> '' AND octet_length(idempotency_key) <= 255);
CREATE UNIQUE INDEX webhook_outbox_idempotency_idx ON webhook_outbox (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- An outbox row addressed to one endpoint only (the operator endpoint's
-- postbox.endpoint.disabled notice): NULL fans out to every subscribed
-- endpoint as before. No foreign key: ON DELETE SET NULL would turn an
-- addressed notice into a broadcast; a deleted target simply gets nothing.
ALTER TABLE webhook_outbox ADD COLUMN endpoint_id uuid;

-- Rate limit, pool-wide: a token bucket on the endpoint row, refilled at
-- rate_limit tokens per second up to half a second's worth (at least
-- one), and taken under the row's lock by every claim, on every replica.
-- max_in_flight counts the endpoint's leased deliveries (leased_until in
-- the future): a replica that dies holding leases frees them when they
-- expire.
ALTER TABLE webhook_endpoints
    ADD COLUMN rate_limit    double precision CHECK (rate_limit > 0 AND rate_limit <= 10000),
    ADD COLUMN max_in_flight integer          CHECK (max_in_flight BETWEEN 1 AND 10000),
    ADD COLUMN rl_tokens     double precision NOT NULL DEFAULT 0 CHECK (rl_tokens >= 0),
    ADD COLUMN rl_at         timestamptz      NOT NULL DEFAULT now(),
    -- Circuit breaker. consecutive_failures counts HTTP attempts that
    -- failed since the last success; failing_since is when that run began
    -- (the auto-disable clock); paused_until holds deliveries back while
    -- the breaker is open, and while the one probe is out (probing).
    ADD COLUMN consecutive_failures integer   NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    ADD COLUMN failing_since timestamptz,
    ADD COLUMN breaker_opens integer          NOT NULL DEFAULT 0 CHECK (breaker_opens >= 0),
    ADD COLUMN paused_until  timestamptz,
    ADD COLUMN probing       boolean          NOT NULL DEFAULT false;

-- The lease a claim or a birth stamped, cleared by the mark or a release:
-- what max_in_flight counts. next_retry_at alone cannot tell a leased row
-- from one waiting out its retry back-off.
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;
CREATE INDEX webhook_deliveries_in_flight_idx ON webhook_deliveries (endpoint_id)
    WHERE status = 'pending' AND leased_until IS NOT NULL;

-- Secret rotation: the secrets an endpoint still signs with besides its
-- primary (webhook_endpoints.secret), each until it expires. While one is
-- active every request carries a signature per secret, space-separated.
CREATE TABLE webhook_endpoint_secrets (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id uuid        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    secret      text        NOT NULL CHECK (secret LIKE 'whsec\_%'),
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoint_secrets_endpoint_idx ON webhook_endpoint_secrets (endpoint_id, expires_at);

-- +goose Down
DROP TABLE webhook_endpoint_secrets;
DROP INDEX webhook_deliveries_in_flight_idx;
ALTER TABLE webhook_deliveries DROP COLUMN leased_until;
ALTER TABLE webhook_endpoints
    DROP COLUMN rate_limit, DROP COLUMN max_in_flight, DROP COLUMN rl_tokens, DROP COLUMN rl_at,
    DROP COLUMN consecutive_failures, DROP COLUMN failing_since, DROP COLUMN breaker_opens,
    DROP COLUMN paused_until, DROP COLUMN probing;
ALTER TABLE webhook_outbox DROP COLUMN endpoint_id;
DROP INDEX webhook_outbox_idempotency_idx;
ALTER TABLE webhook_outbox DROP COLUMN idempotency_key;
DROP INDEX email_outbox_idempotency_idx;
ALTER TABLE email_outbox DROP COLUMN idempotency_key;
