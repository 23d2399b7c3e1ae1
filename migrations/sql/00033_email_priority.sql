-- +goose NO TRANSACTION
-- +goose Up
-- Email priorities and fair shares (see docs/design/outbox-transport.md,
-- Priorities and fair shares).
--
-- A row's priority is a number from 1 to 9; lower runs first. A row
-- inserted without one, by Go or by plain SQL, takes its kind's: the one
-- email_kind_priorities holds for the kind, else 5 (normal). The built-in
-- kinds a person waits for — a password reset, an invitation — are 2
-- (high); a template kind's kind.json may declare its own, which the
-- worker records here when it boots, as it records declared secret keys.
-- One trigger applies the rule, so every writer gets the same answer.
CREATE TABLE IF NOT EXISTS email_kind_priorities (
    kind        text     PRIMARY KEY,
    priority    smallint NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_kind_priorities_kind_format CHECK (kind ~ '^[a-z][a-z0-9_]*$' AND octet_length(kind) <= 64),
    CONSTRAINT email_kind_priorities_priority_range CHECK (priority BETWEEN 1 AND 9)
);
INSERT INTO email_kind_priorities (kind, priority)
VALUES ('password_reset', 2), ('member_invite', 2)
ON CONFLICT (kind) DO NOTHING;

-- The rows already written get 5 without a rewrite of the table (a
-- column's first default is stored once, in the catalog); the default
-- then goes, so that an insert that names no priority reaches the trigger
-- with NULL.
ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 5;
ALTER TABLE email_outbox ALTER COLUMN priority DROP DEFAULT;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_priority_range;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_priority_range
    CHECK (priority BETWEEN 1 AND 9) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_priority_range;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_email_default_priority() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.priority := coalesce((SELECT priority FROM email_kind_priorities WHERE kind = NEW.kind), 5);
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS email_outbox_default_priority ON email_outbox;
CREATE TRIGGER email_outbox_default_priority
    BEFORE INSERT ON email_outbox
    FOR EACH ROW WHEN (NEW.priority IS NULL)
    EXECUTE FUNCTION postbox_email_default_priority();

-- The rows waiting now take their kind's priority, as if written today.
UPDATE email_outbox o SET priority = k.priority
FROM email_kind_priorities k
WHERE o.kind = k.kind AND o.status = 'pending' AND o.next_attempt_at IS NOT NULL AND o.priority <> k.priority;

-- Serves the fair claim's reads of one (priority, customer) from its own
-- edge: pending rows by key, then due time and id (a bulk insert's rows
-- share a due time; the edge stops among them by id). Built concurrently, so
-- enqueues are not blocked while a table of millions of rows is read; a
-- run cut short is finished by running it again.
DROP INDEX CONCURRENTLY IF EXISTS email_outbox_fair_idx_v33;
CREATE INDEX CONCURRENTLY email_outbox_fair_idx_v33 ON email_outbox (priority, customer_id, next_attempt_at, id)
    WHERE status = 'pending' AND next_attempt_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS email_outbox_fair_idx;
ALTER INDEX email_outbox_fair_idx_v33 RENAME TO email_outbox_fair_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS email_outbox_fair_idx;
DROP TRIGGER IF EXISTS email_outbox_default_priority ON email_outbox;
DROP FUNCTION IF EXISTS postbox_email_default_priority();
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_priority_range;
ALTER TABLE email_outbox DROP COLUMN IF EXISTS priority;
DROP TABLE IF EXISTS email_kind_priorities;
