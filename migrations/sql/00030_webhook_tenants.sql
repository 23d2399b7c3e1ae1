-- +goose NO TRANSACTION
-- +goose Up
-- Tenants: whose an endpoint and an event are (docs/OPERATIONS.md,
-- Tenants). A SaaS sends its customers' webhooks; Acme's invoice.paid
-- must reach Acme's endpoints and no one else's. tenant_id is the
-- application's own name for the customer, matched exactly; NULL only
-- meets NULL, so an installation that never sets it fans out as before.
--
-- The rule is the fan-out's (webhook/fanout.go, reachesSQL), and the
-- database holds it as well: webhook_deliveries_tenant_guard refuses any
-- statement that births a delivery to an endpoint of another tenant than
-- its event's — a replica of an earlier release, whose fan-out does not
-- know tenants, running beside this schema during a rolling deploy, or a
-- hand-written INSERT. Such a statement fails whole and changes nothing;
-- its rows stay pending for a replica that knows the rule.
--
-- The format is the Go API's (webhook.Event.Tenant): not empty, at most
-- 255 bytes, no control characters. '' is therefore never a tenant, and
-- coalesce(tenant_id, '') names "no tenant" in the index the fan-out
-- reads an event's endpoints by.
--
-- NULLS NOT DISTINCT (below) is PostgreSQL 15's: an older server is
-- refused here, by name, before anything changes.
-- +goose StatementBegin
DO $$
BEGIN
    IF current_setting('server_version_num')::int < 150000 THEN
        RAISE EXCEPTION 'postbox needs PostgreSQL 15 or newer (this server is %)', current_setting('server_version');
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS tenant_id text;
ALTER TABLE webhook_endpoints DROP CONSTRAINT IF EXISTS webhook_endpoints_tenant_id_format;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_tenant_id_format
    CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 255 AND tenant_id !~ '[\u0001-\u001f\u007f-\u009f]');

ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS tenant_id text;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_tenant_id_format;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_tenant_id_format
    CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 255 AND tenant_id !~ '[\u0001-\u001f\u007f-\u009f]');

-- The event keeps its row's tenant (and a replay its original's), so a
-- replay after the row is pruned goes to the same tenant's endpoints.
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS tenant_id text;

-- The fan-out joins an event to its tenant's endpoints only: at 10,000
-- tenants, a handful of endpoints per event, never a scan of all.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_endpoints_tenant_idx
    ON webhook_endpoints ((coalesce(tenant_id, '')));
-- A tenant's events, for its reads and replays.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_tenant_idx
    ON webhook_events (tenant_id, created_at) WHERE tenant_id IS NOT NULL;

-- Idempotency keys are unique per tenant: Globex's in_1.paid is not
-- swallowed by Acme's. NULLS NOT DISTINCT keeps them unique among the rows
-- without a tenant too. Plain SQL names the new index's columns:
--   ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
-- (ON CONFLICT DO NOTHING without a target works before and after).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS webhook_outbox_tenant_idempotency_idx
    ON webhook_outbox (tenant_id, idempotency_key) NULLS NOT DISTINCT WHERE idempotency_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_idempotency_idx;
ALTER INDEX webhook_outbox_tenant_idempotency_idx RENAME TO webhook_outbox_idempotency_idx;

-- An endpoint's tenant is fixed when it is created: a tenant's scoped
-- calls (webhook.TenantScope) check whose an endpoint is, then act on it,
-- and that is safe only while the answer cannot change in between. The
-- trigger runs AFTER the update: a BEFORE row trigger on the table, even
-- one that never fires, makes every UPDATE of an endpoint (the marks'
-- breaker counts, the claims' rate-limit buckets) lock the row first and
-- read its newest version for the whole statement, which is not how the
-- marks were written to behave.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_endpoints_tenant_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'webhook endpoint %: its tenant cannot change (create an endpoint for the other tenant)', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'webhook_endpoints_tenant_fixed';
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS webhook_endpoints_tenant_fixed ON webhook_endpoints;
CREATE TRIGGER webhook_endpoints_tenant_fixed AFTER UPDATE OF tenant_id ON webhook_endpoints
    FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
    EXECUTE FUNCTION webhook_endpoints_tenant_fixed();

-- An event inserted without a tenant by a fan-out or a replay that does
-- not know the column (an earlier release) takes its row's, or its
-- original's: the guard below then judges its deliveries by the tenant
-- the application wrote. This release always writes it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_events_tenant_inherit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.replay_of IS NOT NULL THEN
        SELECT tenant_id INTO NEW.tenant_id FROM webhook_events WHERE id = NEW.replay_of;
    ELSIF NEW.outbox_id IS NOT NULL THEN
        SELECT tenant_id INTO NEW.tenant_id FROM webhook_outbox WHERE id = NEW.outbox_id;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS webhook_events_tenant_inherit ON webhook_events;
CREATE TRIGGER webhook_events_tenant_inherit BEFORE INSERT ON webhook_events
    FOR EACH ROW WHEN (NEW.tenant_id IS NULL AND (NEW.replay_of IS NOT NULL OR NEW.outbox_id IS NOT NULL))
    EXECUTE FUNCTION webhook_events_tenant_inherit();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_deliveries_tenant_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT b.event_id, b.endpoint_id, e.tenant_id AS event_tenant INTO bad
    FROM born b
    JOIN webhook_events e ON e.id = b.event_id
    JOIN webhook_endpoints ep ON ep.id = b.endpoint_id
    WHERE coalesce(e.tenant_id, '') <> coalesce(ep.tenant_id, '')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'webhook delivery of event % to endpoint % refused: the endpoint belongs to another tenant than the event''s',
            bad.event_id, bad.endpoint_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'webhook_deliveries_tenant_guard';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS webhook_deliveries_tenant_guard ON webhook_deliveries;
CREATE TRIGGER webhook_deliveries_tenant_guard AFTER INSERT ON webhook_deliveries
    REFERENCING NEW TABLE AS born FOR EACH STATEMENT
    EXECUTE FUNCTION webhook_deliveries_tenant_guard();

-- +goose Down
-- Rows are kept. Keys unique per tenant may repeat across tenants; the
-- older rule needs them unique across all rows, so of each repeated key
-- the oldest row keeps it and the others lose it (their rows stay, as
-- sent or pending as they were). The tenant columns go: an endpoint of a
-- tenant then receives every event of its types again, as before this.
DROP TRIGGER IF EXISTS webhook_deliveries_tenant_guard ON webhook_deliveries;
DROP FUNCTION IF EXISTS webhook_deliveries_tenant_guard();
DROP TRIGGER IF EXISTS webhook_events_tenant_inherit ON webhook_events;
DROP FUNCTION IF EXISTS webhook_events_tenant_inherit();
DROP TRIGGER IF EXISTS webhook_endpoints_tenant_fixed ON webhook_endpoints;
DROP FUNCTION IF EXISTS webhook_endpoints_tenant_fixed();
UPDATE webhook_outbox o SET idempotency_key = NULL
WHERE o.idempotency_key IS NOT NULL AND EXISTS (SELECT 1 FROM webhook_outbox f
    WHERE f.idempotency_key = o.idempotency_key AND (f.created_at, f.id) < (o.created_at, o.id));
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS webhook_outbox_global_idempotency_idx ON webhook_outbox (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_idempotency_idx;
ALTER INDEX webhook_outbox_global_idempotency_idx RENAME TO webhook_outbox_idempotency_idx;
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_tenant_idx;
DROP INDEX CONCURRENTLY IF EXISTS webhook_endpoints_tenant_idx;
ALTER TABLE webhook_events DROP COLUMN IF EXISTS tenant_id;
ALTER TABLE webhook_outbox DROP COLUMN IF EXISTS tenant_id;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS tenant_id;
