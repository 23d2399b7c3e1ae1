-- +goose NO TRANSACTION
-- +goose Up
-- An email's attempt log after a requeue.
--
-- A requeue gives a failed row a fresh attempt budget: attempts goes back
-- to 0, and the retry schedule counts from there. email_attempts was keyed
-- by (row_id, attempt), so the attempts after a requeue were logged under
-- numbers the log already had and the primary key dropped them: a row
-- requeued and then sent showed its old failure and no "sent".
--
-- Now each row also keeps prior_attempts, the attempts it made before its
-- requeues, and the log numbers an attempt prior_attempts + attempts: the
-- row's lifetime count, so the numbers go on (#17, #18 after sixteen) while
-- attempts itself stays the budget the operator's requeue resets (see
-- docs/design/outbox-transport.md, Redelivery semantics).
--
-- The requeue is written by a trigger, not by postbox's Requeue alone,
-- because the operator UPDATE is documented as plain SQL:
-- whoever runs it gets the same log. The trigger fires only when status
-- moves to pending from another state (claims and marks never do that),
-- adds the attempts the requeue reset to prior_attempts, and appends the
-- requeue to email_requeues: when, from which state, after how many
-- attempts, and who — postbox's Requeue names its caller in the
-- transaction-local setting postbox.actor; plain SQL is named by its role.
--
-- Adding a column with a constant default rewrites nothing; its CHECK is
-- added NOT VALID and validated apart, so no write waits for the scan of
-- a table of millions of rows.
ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS prior_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_prior_attempts_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_prior_attempts_check CHECK (prior_attempts >= 0) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_prior_attempts_check;

CREATE TABLE IF NOT EXISTS email_requeues (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    row_id      uuid        NOT NULL REFERENCES email_outbox (id) ON DELETE CASCADE,
    from_status text        NOT NULL CHECK (from_status IN ('dispatched', 'skipped', 'failed')),
    attempt     integer     NOT NULL CHECK (attempt >= 0), -- the last attempt's number in the log
    actor       text        NOT NULL CHECK (actor <> '' AND octet_length(actor) <= 200),
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS email_requeues_row_idx ON email_requeues (row_id, id);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_email_requeued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A requeue that resets attempts moves what it reset into
    -- prior_attempts; one that keeps attempts keeps the numbering as is.
    NEW.prior_attempts := OLD.prior_attempts + greatest(OLD.attempts - NEW.attempts, 0);
    INSERT INTO email_requeues (row_id, from_status, attempt, actor)
    VALUES (OLD.id, OLD.status, OLD.prior_attempts + OLD.attempts,
            left(coalesce(nullif(current_setting('postbox.actor', true), ''), 'sql:' || session_user), 200));
    RETURN NEW;
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS email_outbox_requeued ON email_outbox;
CREATE TRIGGER email_outbox_requeued BEFORE UPDATE OF status ON email_outbox
    FOR EACH ROW WHEN (OLD.status <> 'pending' AND NEW.status = 'pending')
    EXECUTE FUNCTION postbox_email_requeued();

-- +goose Down
DROP TRIGGER IF EXISTS email_outbox_requeued ON email_outbox;
DROP FUNCTION IF EXISTS postbox_email_requeued();
DROP TABLE IF EXISTS email_requeues;
ALTER TABLE email_outbox DROP COLUMN IF EXISTS prior_attempts;
