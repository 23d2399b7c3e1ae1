-- +goose Up
-- A webhook_outbox row's place in its ordering key (ordering_seq,
-- migration 00023) comes from postbox_ordering_seq only. As a column
-- default, any INSERT could supply its own and any UPDATE move a row:
-- plain SQL could put an event ahead of one already queued, or behind
-- every later one, of its key. Now the place is taken by a trigger at
-- insert, and a value supplied, or a change of it, is refused naming the
-- column, with the SQLSTATE Postgres gives a GENERATED ALWAYS column
-- (428C9); an explicit NULL or DEFAULT means "not supplied" and takes a
-- place. The fan-out's claim and marks never write the column, so the
-- UPDATE trigger (OF ordering_seq) does not even fire for them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_ordering_seq_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.ordering_seq IS NULL THEN
        NEW.ordering_seq := nextval('postbox_ordering_seq');
    ELSIF NEW.ordering_seq IS DISTINCT FROM (CASE WHEN TG_OP = 'UPDATE' THEN OLD.ordering_seq END) THEN
        RAISE EXCEPTION 'webhook_outbox.ordering_seq is set by postbox from postbox_ordering_seq: leave it out of the %', TG_OP
            USING ERRCODE = 'generated_always', COLUMN = 'ordering_seq', TABLE = 'webhook_outbox',
                HINT = 'A row''s place in its ordering key is the order its INSERT took; insert the rows of a key in the order they are to be delivered.';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS webhook_outbox_ordering_seq_guard_insert ON webhook_outbox;
CREATE TRIGGER webhook_outbox_ordering_seq_guard_insert BEFORE INSERT ON webhook_outbox
    FOR EACH ROW EXECUTE FUNCTION postbox_ordering_seq_guard();
DROP TRIGGER IF EXISTS webhook_outbox_ordering_seq_guard_update ON webhook_outbox;
CREATE TRIGGER webhook_outbox_ordering_seq_guard_update BEFORE UPDATE OF ordering_seq ON webhook_outbox
    FOR EACH ROW EXECUTE FUNCTION postbox_ordering_seq_guard();
ALTER TABLE webhook_outbox ALTER COLUMN ordering_seq DROP DEFAULT;

-- +goose Down
ALTER TABLE webhook_outbox ALTER COLUMN ordering_seq SET DEFAULT nextval('postbox_ordering_seq');
DROP TRIGGER IF EXISTS webhook_outbox_ordering_seq_guard_update ON webhook_outbox;
DROP TRIGGER IF EXISTS webhook_outbox_ordering_seq_guard_insert ON webhook_outbox;
DROP FUNCTION IF EXISTS postbox_ordering_seq_guard();
