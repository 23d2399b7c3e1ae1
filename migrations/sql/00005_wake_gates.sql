-- +goose Up
-- Wake-ups: a transaction that inserts outbox rows tells the workers, so a
-- row committed while the pool is up is claimed within milliseconds,
-- whether it came from outbox.Enqueue or from a plain INSERT in any
-- language. The workers LISTEN on postbox_wake; the payload is the table.
--
-- A notifying commit takes a cluster-wide lock and holds it through its WAL
-- flush, so notifying transactions commit one at a time. Notifying from
-- every enqueueing transaction would serialise the application's commits.
-- So at most one transaction per table and 10 ms time slot notifies: the
-- first to take that slot's advisory lock. pg_try_advisory_xact_lock never
-- waits; a transaction that finds the slot taken skips the notify and its
-- row is found by the next slot's notifier or by the workers' short poll
-- after any activity (internal/engine). A long transaction that holds one
-- slot's lock blocks no other slot. This is River's insert-notify limiter
-- (at most one notify per queue per FetchCooldown), made pool-wide.
-- +goose StatementBegin
CREATE FUNCTION postbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pg_try_advisory_xact_lock(
        hashtext('postbox_wake:' || TG_TABLE_NAME),
        (floor(extract(epoch FROM clock_timestamp()) * 100)::bigint % 2147483647)::int
    ) THEN
        PERFORM pg_notify('postbox_wake', TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- FOR EACH STATEMENT: a multi-row INSERT notifies (at most) once.
CREATE TRIGGER email_outbox_wake AFTER INSERT ON email_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION postbox_wake();
CREATE TRIGGER webhook_outbox_wake AFTER INSERT ON webhook_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION postbox_wake();

-- Gates: pool-wide mutual exclusion for periodic passes that must not run
-- twice at once (the webhook retry pass; the pruner: see
-- docs/design/outbox-transport.md, Retry gating). A holder keeps its gate by
-- renewing expires_at; a holder that dies frees it when the lease runs out,
-- without anyone's help.
CREATE TABLE postbox_gates (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE postbox_gates;
DROP TRIGGER webhook_outbox_wake ON webhook_outbox;
DROP TRIGGER email_outbox_wake ON email_outbox;
DROP FUNCTION postbox_wake();
