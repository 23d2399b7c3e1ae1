-- +goose NO TRANSACTION
-- +goose Up
-- Ordered delivery per key (docs/design/outbox-transport.md, Ordered
-- delivery). An event may carry an ordering key (a customer, an invoice);
-- for each endpoint and key, deliveries go out in the order of their
-- outbox rows, ordering_seq: a delivery is not attempted while an earlier
-- one of the same endpoint and key is pending — waiting for its first
-- attempt, leased, or waiting for a retry — nor while an earlier outbox
-- row of the key waits to be fanned out. NULL means unordered, as before.
--
-- ordering_seq comes from one sequence, at insert: two rows of one key are
-- ordered as they were inserted (so as committed, when the second is
-- written after the first committed, the case ordering is for). The
-- fan-out copies key and place onto the event and its deliveries; a
-- replay's event takes a new place, behind what is queued; a requeued
-- delivery keeps its own, so it goes out before what came after it.
--
-- Columns are added without defaults that would rewrite a table of
-- months; the sequence's default applies to rows inserted from now on.
-- The indexes are partial (keyed rows only) and built CONCURRENTLY, so
-- enqueues and fan-outs go on while they build.
CREATE SEQUENCE IF NOT EXISTS postbox_ordering_seq AS bigint;

ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS ordering_seq bigint;
ALTER TABLE webhook_outbox ALTER COLUMN ordering_seq SET DEFAULT nextval('postbox_ordering_seq');
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_ordering_key_format;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_ordering_key_format
    CHECK (ordering_key <> '' AND octet_length(ordering_key) <= 255) NOT VALID;
ALTER TABLE webhook_outbox VALIDATE CONSTRAINT webhook_outbox_ordering_key_format;

ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS ordering_seq bigint;
ALTER TABLE webhook_events ALTER COLUMN ordering_seq SET DEFAULT nextval('postbox_ordering_seq');

ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS ordering_seq bigint;
-- When an operator let the key go on past this failed delivery ("skip the
-- head"): under the block policy a failed delivery holds its key until it
-- is requeued or skipped.
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS order_skipped_at timestamptz;
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_ordering_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_ordering_check
    CHECK ((ordering_key IS NULL) = (ordering_seq IS NULL) AND (order_skipped_at IS NULL OR ordering_key IS NOT NULL)) NOT VALID;
ALTER TABLE webhook_deliveries VALIDATE CONSTRAINT webhook_deliveries_ordering_check;

-- What the rest of a key does when a delivery of it fails for good:
-- 'block' waits (shown, counted, released by a requeue or a skip),
-- 'proceed' goes on without it.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS order_on_failure text NOT NULL DEFAULT 'block';
ALTER TABLE webhook_endpoints DROP CONSTRAINT IF EXISTS webhook_endpoints_order_on_failure_check;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_order_on_failure_check
    CHECK (order_on_failure IN ('block', 'proceed'));

-- What may hold a delivery back: an earlier delivery of its endpoint and
-- key that is not delivered, and an earlier outbox row of its key not yet
-- fanned out.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_ordering_idx
    ON webhook_deliveries (endpoint_id, ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND status <> 'succeeded';
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_outbox_ordering_idx
    ON webhook_outbox (ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND status = 'pending';

-- When a delivery of a key stops holding it — it is delivered, fails, or
-- is skipped — the next pending delivery of its endpoint and key is made
-- due now, in front of every lane's claim window, and the retry lanes are
-- woken: the next one goes out within a claim, not at the sweep. Only a
-- delivery that is waiting (never attempted, or due) is moved: one in its
-- retry back-off keeps its time. A trigger, so every way of resolving a
-- delivery — a mark, an operator's SQL, the skip — hands the key on.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_ordering_next() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhook_deliveries SET next_retry_at = now()
    WHERE id = (
        SELECT n.id FROM webhook_deliveries n
        WHERE n.endpoint_id = NEW.endpoint_id AND n.ordering_key = NEW.ordering_key
            AND n.ordering_seq > NEW.ordering_seq AND n.status = 'pending'
        ORDER BY n.ordering_seq
        LIMIT 1)
    AND status = 'pending' AND (next_retry_at IS NULL OR next_retry_at < now())
    AND (leased_until IS NULL OR leased_until <= now());
    IF FOUND AND pg_try_advisory_xact_lock(
        hashtext('postbox_wake:webhook_deliveries'),
        (floor(extract(epoch FROM clock_timestamp()) * 100)::bigint % 2147483647)::int
    ) THEN
        PERFORM pg_notify('postbox_wake', 'webhook_deliveries');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS webhook_deliveries_ordering_next ON webhook_deliveries;
CREATE TRIGGER webhook_deliveries_ordering_next AFTER UPDATE OF status, order_skipped_at ON webhook_deliveries
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL AND (
        (OLD.status = 'pending' AND NEW.status <> 'pending')
        OR (OLD.order_skipped_at IS NULL AND NEW.order_skipped_at IS NOT NULL)))
    EXECUTE FUNCTION postbox_ordering_next();

-- +goose Down
-- Going down drops every row's key and place: a pending row of a key would
-- then go out unordered, and an up again would not give it its key back.
-- Rather than lose that silently, the step refuses while any row of a key
-- is pending, saying how many (as 00015's does for custom kinds): let
-- them be delivered (or cancel them) first.
-- +goose StatementBegin
DO $$
DECLARE
    outbox bigint;
    deliveries bigint;
BEGIN
    SELECT count(*) INTO outbox FROM webhook_outbox WHERE ordering_key IS NOT NULL AND status = 'pending';
    SELECT count(*) INTO deliveries FROM webhook_deliveries WHERE ordering_key IS NOT NULL AND status = 'pending';
    IF outbox + deliveries > 0 THEN
        RAISE EXCEPTION 'migration 00023 down: % webhook_outbox rows and % webhook_deliveries rows are pending with an ordering key; going down would drop their keys and send them unordered: let them be delivered (or cancel them) first', outbox, deliveries
            USING HINT = 'SELECT ordering_key, status, count(*) FROM webhook_deliveries WHERE ordering_key IS NOT NULL AND status = ''pending'' GROUP BY 1, 2';
    END IF;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS webhook_deliveries_ordering_next ON webhook_deliveries;
DROP FUNCTION IF EXISTS postbox_ordering_next();
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_ordering_idx;
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_ordering_idx;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS order_on_failure;
ALTER TABLE webhook_deliveries DROP COLUMN IF EXISTS order_skipped_at;
ALTER TABLE webhook_deliveries DROP COLUMN IF EXISTS ordering_seq;
ALTER TABLE webhook_deliveries DROP COLUMN IF EXISTS ordering_key;
ALTER TABLE webhook_events DROP COLUMN IF EXISTS ordering_seq;
ALTER TABLE webhook_events DROP COLUMN IF EXISTS ordering_key;
ALTER TABLE webhook_outbox DROP COLUMN IF EXISTS ordering_seq;
ALTER TABLE webhook_outbox DROP COLUMN IF EXISTS ordering_key;
DROP SEQUENCE IF EXISTS postbox_ordering_seq;
