-- +goose Up
-- Wake-ups that need no follow-up claim. The insert triggers (00005) let
-- one transaction per table and 10 ms slot notify: the first to take the
-- slot's advisory lock. Another that inserted in the same slot skipped
-- its notify, and if it committed after the notifier's wake-up had been
-- claimed, its row waited for the next notify or the workers' poll. The
-- workers covered that with one more claim 20 ms after every wake-up's,
-- which at a few messages a second was half of every claim they made.
--
-- Now a transaction that finds its slot taken tries the next one, and
-- notifies if it gets it: at most two notifiers per slot's time, and a
-- row goes without a wake-up only if both its slot and the next were
-- held by transactions that committed before it — under a load steady
-- enough for that, the next slot's notifier wakes the workers anyway.
-- postbox_wake_notify is the one place that takes a slot and notifies:
-- both triggers that wake lanes call it.
-- +goose StatementBegin
CREATE FUNCTION postbox_wake_notify(tbl text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    slot bigint := floor(extract(epoch FROM clock_timestamp()) * 100)::bigint;
BEGIN
    IF pg_try_advisory_xact_lock(hashtext('postbox_wake:' || tbl), (slot % 2147483647)::int)
        OR pg_try_advisory_xact_lock(hashtext('postbox_wake:' || tbl), ((slot + 1) % 2147483647)::int)
    THEN
        PERFORM pg_notify('postbox_wake', tbl);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM postbox_wake_notify(TG_TABLE_NAME);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The ordering trigger's body as 00023 made it, its wake-up through
-- postbox_wake_notify.
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
    IF FOUND THEN
        PERFORM postbox_wake_notify('webhook_deliveries');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- 00023's and 00005's definitions, as they were.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_ordering_next() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhook_deliveries SET next_retry_at = now() WHERE id = (
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pg_try_advisory_xact_lock(hashtext('postbox_wake:' || TG_TABLE_NAME),
        (floor(extract(epoch FROM clock_timestamp()) * 100)::bigint % 2147483647)::int
    ) THEN
        PERFORM pg_notify('postbox_wake', TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP FUNCTION postbox_wake_notify(text);
