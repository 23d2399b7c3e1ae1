-- +goose NO TRANSACTION
-- +goose Up
-- Email kinds are no longer a fixed list: a worker's template directory
-- (EMAIL_TEMPLATES_DIR, docs/TEMPLATES.md) adds kinds of its own, and a
-- row's kind only has to be a plain identifier — a lower-case letter, then
-- up to 63 lower-case letters, digits or underscores — the rule
-- outbox.Email.Validate applies too. The database cannot know which kinds
-- the workers' directories hold; a row of a kind no worker knows fails
-- permanently at send time with last_error naming the kind.
--
-- The format CHECK is added NOT VALID and validated apart, before the
-- list CHECK goes, so there is never a moment with neither.
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_format;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_format
    CHECK (kind ~ '^[a-z][a-z0-9_]{0,63}$') NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_kind_format;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_check;

-- +goose Down
-- Going down restores the list of the four built-in kinds, which a row of
-- a custom kind would break. Rather than fail on the constraint, or
-- rewrite anyone's rows, the step refuses, saying how many rows to deal
-- with first (delete them, or let them be sent and pruned).
-- +goose StatementBegin
DO $$
DECLARE
    n bigint;
BEGIN
    SELECT count(*) INTO n FROM email_outbox
    WHERE kind NOT IN ('raw', 'invoice', 'password_reset', 'member_invite');
    IF n > 0 THEN
        RAISE EXCEPTION 'migration 00015 down: % email_outbox rows have a custom kind (not raw, invoice, password_reset or member_invite); delete them or change their kind first', n
            USING HINT = 'SELECT kind, status, count(*) FROM email_outbox WHERE kind NOT IN (''raw'', ''invoice'', ''password_reset'', ''member_invite'') GROUP BY 1, 2';
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_check
    CHECK (kind IN ('raw', 'invoice', 'password_reset', 'member_invite'));
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_format;
