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
-- six: its CHECK becomes the key format, element by element, without a
-- function call. Every CHECK runs on every UPDATE of a row, so on every
-- mark: the elements are joined and matched once, and the separators
-- counted, so an element holding one cannot pass for two. It is added NOT
-- VALID and validated apart, so no write waits for the scan.
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_scrubbed_keys_format;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_scrubbed_keys_format
    CHECK (scrubbed_keys IS NULL OR cardinality(scrubbed_keys) = 0
        OR (array_to_string(scrubbed_keys, ',', '*') ~ '^[a-z][a-z0-9_]*(,[a-z][a-z0-9_]*)*$'
            AND length(array_to_string(scrubbed_keys, ',', '*')) - length(replace(array_to_string(scrubbed_keys, ',', '*'), ',', ''))
                = cardinality(scrubbed_keys) - 1)) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_scrubbed_keys_format;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_scrubbed_keys_check;

-- The kind format of migration 00015, the same rule written so that it
-- costs a quarter as much on every insert and mark: Postgres's regular
-- expressions expand a bounded repeat ({0,63}) into that many states, so
-- the length is checked apart. The new CHECK is validated before the old
-- one goes, then takes its name.
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_format_next;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_format_next
    CHECK (kind ~ '^[a-z][a-z0-9_]*$' AND octet_length(kind) <= 64) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_kind_format_next;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_format;
ALTER TABLE email_outbox RENAME CONSTRAINT email_outbox_kind_format_next TO email_outbox_kind_format;

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
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_format_next;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_format_next
    CHECK (kind ~ '^[a-z][a-z0-9_]{0,63}$') NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_kind_format_next;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_kind_format;
ALTER TABLE email_outbox RENAME CONSTRAINT email_outbox_kind_format_next TO email_outbox_kind_format;
DROP TABLE IF EXISTS email_secret_keys;
