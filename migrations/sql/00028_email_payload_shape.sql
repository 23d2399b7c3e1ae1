-- +goose Up
-- An email's payload is refused at insert when its shape can never be
-- sent: what the decoder (outbox.Payload) refuses for a value's JSON type,
-- the table refuses too, in the application's own transaction, with the
-- field named. Before, {"to": ["ada@…", "bob@…"]} was accepted and failed
-- at send time ("cannot unmarshal array into Go struct field Payload.to"),
-- where nothing but a corrected row could help.
--
-- A key of outbox.Payload may hold JSON null or, as the decoder reads it:
--   * a string: every field but attempt_number (pdf is its base64);
--   * a sealed envelope, an object holding "enc": the secret fields, which
--     Enqueue with OUTBOX_ENCRYPTION_KEYS writes sealed;
--   * an integer within Go's int (int64), written without a fraction or an
--     exponent: attempt_number.
-- Keys Payload does not know may hold anything (custom kinds read them).
-- Required fields and values (one valid address, a body, a URL) stay the
-- worker's to check at send time, as do keys spelled other than exactly:
-- they depend on the kind and on the workers' template directories.
-- outbox's TestPlainSQL_PayloadShapeRefusedByTheTable holds this list to
-- Payload's fields.
--
-- A trigger, not a CHECK, so the refusal names the field (SQLSTATE 23514,
-- check_violation, as a CHECK's; column payload; constraint
-- email_outbox_payload_shape), and so it runs at INSERT only: the claims
-- and marks UPDATE every row, and a CHECK would read each payload again
-- (a large one detoasted) on each of them. An UPDATE of the payload is not
-- checked; rows already in the table are left as they are: one that
-- cannot be sent fails at its turn, as before.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_email_payload_shape() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF jsonb_typeof(NEW.payload) IS DISTINCT FROM 'object' THEN
        RETURN NEW; -- email_outbox_payload_check refuses it
    END IF;
    SELECT f.key, f.want, jsonb_typeof(NEW.payload -> f.key) AS got INTO bad
    FROM (VALUES
        ('to', 'string'), ('subject', 'string'), ('text', 'string'), ('html', 'string'),
        ('pdf', 'secret'), ('pdf_name', 'string'), ('name', 'string'), ('org_name', 'string'),
        ('invoice_number', 'string'), ('amount_due', 'string'), ('due_date', 'string'),
        ('attempt_number', 'integer'), ('trigger', 'string'),
        ('setup_url', 'secret'), ('update_url', 'secret'), ('password_reset_url', 'secret'),
        ('invite_url', 'secret'), ('public_token', 'secret')) AS f (key, want)
    WHERE NEW.payload ? f.key AND NOT CASE jsonb_typeof(NEW.payload -> f.key)
        WHEN 'null' THEN true
        WHEN 'string' THEN f.want <> 'integer'
        WHEN 'object' THEN f.want = 'secret' AND NEW.payload -> f.key ? 'enc'
        WHEN 'number' THEN f.want = 'integer' AND (NEW.payload ->> f.key) ~ '^-?[0-9]{1,19}$'
            AND (NEW.payload ->> f.key)::numeric BETWEEN -9223372036854775808 AND 9223372036854775807
        ELSE false END
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'email_outbox: payload.% must be %, not %', bad.key,
            CASE bad.want
                WHEN 'integer' THEN 'a whole number (a JSON integer)'
                WHEN 'secret' THEN 'a JSON string (or a sealed envelope)'
                ELSE 'a JSON string' END,
            CASE WHEN bad.got = 'number' AND bad.want = 'integer' THEN 'a fraction or a number past int64' ELSE 'a JSON ' || bad.got END
            USING ERRCODE = 'check_violation', TABLE = 'email_outbox', COLUMN = 'payload',
                CONSTRAINT = 'email_outbox_payload_shape',
                HINT = CASE WHEN bad.key = 'to' THEN 'payload.to holds one address; for several recipients insert one row each'
                    ELSE 'the payload keys and their types: README, "Payload keys"' END;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS email_outbox_payload_shape ON email_outbox;
CREATE TRIGGER email_outbox_payload_shape BEFORE INSERT ON email_outbox
    FOR EACH ROW EXECUTE FUNCTION postbox_email_payload_shape();

-- +goose Down
DROP TRIGGER IF EXISTS email_outbox_payload_shape ON email_outbox;
DROP FUNCTION IF EXISTS postbox_email_payload_shape();
