-- +goose NO TRANSACTION
-- +goose Up
-- Extra secret payload keys (see docs/design/outbox-transport.md, Scrub of
-- secret keys, and docs/TEMPLATES.md, "Secret keys"). A template
-- directory's kind may declare payload keys of its own as secret in its
-- kind.json (a magic-link URL); the worker records each here when it
-- boots, and from then on every statement that knows the six built-in
-- secret keys knows these too: the sent, skipped and cancelled marks scrub
-- them, the readers (worker show, the console) never return them, and a
-- rekey re-seals them. The list lives in the database rather than in each
-- process so that a replica, a CLI command or a plain-SQL reader without
-- the template directory treats a declared key as secret all the same.
--
-- A key is secret in every row once declared, whatever its kind: one name
-- means one thing across a directory, as the six do. Nothing removes a
-- key when a kind stops declaring it (a row still pending may hold it);
-- an operator who is sure deletes it here.
--
-- The key rule is outbox.ValidateSecretKey's: a plain identifier, not a
-- field of outbox.Payload (those are kept after sending, or are the six).
CREATE TABLE IF NOT EXISTS email_secret_keys (
    key         text PRIMARY KEY,
    declared_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_secret_keys_key_format CHECK (key ~ '^[a-z][a-z0-9_]{0,63}$'
        AND key NOT IN ('to', 'subject', 'text', 'html', 'pdf', 'pdf_name', 'name', 'org_name', 'invoice_number',
                        'amount_due', 'due_date', 'attempt_number', 'trigger', 'setup_url', 'update_url',
                        'password_reset_url', 'invite_url', 'public_token')) -- outbox.Payload's JSON names
);

-- scrubbed_keys (migration 00013) now names declared keys as well as the
-- six: its CHECK becomes the key format, element by element. It is added
-- NOT VALID and validated apart, so no write waits for the scan.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_plain_keys(keys text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(bool_and(k IS NOT NULL AND k ~ '^[a-z][a-z0-9_]{0,63}$'), true) FROM unnest(keys) AS k
$$;
-- +goose StatementEnd
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_scrubbed_keys_format;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_scrubbed_keys_format
    CHECK (postbox_plain_keys(scrubbed_keys)) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_scrubbed_keys_format;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_scrubbed_keys_check;

-- +goose Down
-- An older worker scrubs the six only, so its scrubbed_keys CHECK allows
-- those names alone: a sent row that had declared keys scrubbed keeps its
-- record of the six it lost, and the names of the others go with the
-- table. Their values were removed already; nothing secret comes back.
UPDATE email_outbox SET scrubbed_keys = ARRAY(SELECT k FROM unnest(scrubbed_keys) AS k
    WHERE k IN ('setup_url', 'update_url', 'password_reset_url', 'invite_url', 'public_token', 'pdf'))
WHERE NOT scrubbed_keys <@ ARRAY['setup_url', 'update_url', 'password_reset_url', 'invite_url', 'public_token', 'pdf'];
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_scrubbed_keys_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_scrubbed_keys_check CHECK (scrubbed_keys <@
    ARRAY['setup_url', 'update_url', 'password_reset_url', 'invite_url', 'public_token', 'pdf']) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_scrubbed_keys_check;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_scrubbed_keys_format;
DROP FUNCTION IF EXISTS postbox_plain_keys(text[]);
DROP TABLE IF EXISTS email_secret_keys;
