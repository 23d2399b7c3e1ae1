-- +goose Up
-- Store new payloads with lz4 instead of pglz where the server has it
-- (PostgreSQL 14+ built --with-lz4, as the Debian, Ubuntu and official
-- Docker builds are). A payload is compressed when it is written and
-- decompressed when it is claimed, and the dispatched mark's scrub writes
-- it again: lz4 does each of those for about half the CPU of pglz
-- (docs/PERFORMANCE.md). Rows already stored keep their compression until
-- they are next written; nothing is rewritten here. Elsewhere this is a
-- no-op, and every payload still reads the same.
-- +goose StatementBegin
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 AND EXISTS (
        SELECT 1 FROM pg_settings
        WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)
    ) THEN
        ALTER TABLE email_outbox ALTER COLUMN payload SET COMPRESSION lz4;
        ALTER TABLE webhook_outbox ALTER COLUMN payload SET COMPRESSION lz4;
        ALTER TABLE webhook_events ALTER COLUMN payload SET COMPRESSION lz4;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        ALTER TABLE email_outbox ALTER COLUMN payload SET COMPRESSION default;
        ALTER TABLE webhook_outbox ALTER COLUMN payload SET COMPRESSION default;
        ALTER TABLE webhook_events ALTER COLUMN payload SET COMPRESSION default;
    END IF;
END
$$;
-- +goose StatementEnd
