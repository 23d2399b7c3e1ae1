-- +goose NO TRANSACTION
-- +goose Up
-- Fair shares in the webhook fan-out (see docs/design/outbox-transport.md,
-- Priorities and fair shares): the outbox lane claims webhook_outbox rows
-- round-robin over their share key — the tenant, or, for an event of no
-- tenant, the endpoint it is addressed to, or '' for one fanned out to
-- every endpoint of no tenant. This index serves each key's reads from its
-- own edge: pending rows by key, then due time and id. The expression is
-- the one the claim writes (webhook.outboxTable's Share), character for
-- character, or the planner will not match it. Built concurrently, so
-- enqueues are not blocked while a table of millions of rows is read; a
-- run cut short is finished by running it again.
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_fair_idx_v34;
CREATE INDEX CONCURRENTLY webhook_outbox_fair_idx_v34
    ON webhook_outbox ((coalesce(tenant_id, endpoint_id::text, '')), next_attempt_at, id)
    WHERE status = 'pending' AND next_attempt_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_fair_idx;
ALTER INDEX webhook_outbox_fair_idx_v34 RENAME TO webhook_outbox_fair_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_fair_idx;
