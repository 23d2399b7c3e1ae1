-- +goose NO TRANSACTION
-- +goose Up
-- Which secret keys the scrub removed (see docs/design/outbox-transport.md,
-- Scrub of secret keys).
--
-- The sent and skipped marks remove the six secret payload keys (the
-- single-use links, the public token, the PDF) in the same UPDATE. Once
-- removed, nothing said which of them the row had had, so an operator's
-- view listed all six as "scrubbed" for an email that never carried any.
-- The marks now also write the names of the keys they removed (an empty
-- array for none): names only, never a value. NULL is a row not scrubbed
-- yet, or scrubbed before this migration, for which it cannot be known.
--
-- A nullable column without a default rewrites nothing; its CHECK (only
-- the six names) is added NOT VALID and validated apart, so no write waits
-- for the scan.
ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS scrubbed_keys text[];
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_scrubbed_keys_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_scrubbed_keys_check CHECK (scrubbed_keys <@
    ARRAY['setup_url', 'update_url', 'password_reset_url', 'invite_url', 'public_token', 'pdf']) NOT VALID; -- outbox.SecretPayloadKeys
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_scrubbed_keys_check;

-- +goose Down
ALTER TABLE email_outbox DROP COLUMN IF EXISTS scrubbed_keys;
