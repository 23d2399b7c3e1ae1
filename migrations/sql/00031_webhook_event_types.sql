-- +goose Up
-- The event-type catalog (docs/OPERATIONS.md, Event types): the types an
-- application sends, each with a description, an example payload and an
-- optional JSON Schema. `worker event-types sync DIR` writes it from a
-- directory of files; plain SQL may too, under the same rules.
--
-- A payload of a type with a schema is checked against it: EnqueueEvent
-- refuses one that fails, and the fan-out marks a plain-SQL row that fails
-- it failed, with the same message, before anything is sent
-- (webhook/schema.go). Postgres cannot run JSON Schema, so the checks run
-- in Go; schema_digest names a schema by its content, so a process
-- compiles each schema once and knows when the catalog's has changed.
-- md5 is an identity here, not a protection.
--
-- While the catalog holds any type, an endpoint may subscribe only to
-- catalog types (empty event_types, every type, stays allowed): the two
-- triggers below hold that rule for whichever side changes.
CREATE TABLE IF NOT EXISTS webhook_event_types (
    name          text        PRIMARY KEY,
    description   text        NOT NULL DEFAULT '',
    schema        jsonb,
    example       jsonb,
    deprecated    boolean     NOT NULL DEFAULT false,
    schema_digest text        GENERATED ALWAYS AS (md5(schema::text)) STORED,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- The outbox's own rule for an event type (webhook_outbox_event_type_format).
    CONSTRAINT webhook_event_types_name_format
        CHECK (name <> '' AND octet_length(name) <= 200 AND name !~ '[\x01-\x20\x7f]'),
    CONSTRAINT webhook_event_types_description_size CHECK (octet_length(description) <= 4096),
    -- A schema is a JSON object or a boolean; either document at most 256 KiB.
    CONSTRAINT webhook_event_types_schema_shape
        CHECK (schema IS NULL OR (jsonb_typeof(schema) IN ('object', 'boolean') AND octet_length(schema::text) <= 262144)),
    CONSTRAINT webhook_event_types_example_size CHECK (example IS NULL OR octet_length(example::text) <= 262144)
);

-- The rule, for one endpoint: each type it subscribes to is in the
-- catalog, or the catalog is empty.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_event_types_require(endpoint uuid, types text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    unknown text;
BEGIN
    SELECT t INTO unknown FROM unnest(types) AS t
    WHERE NOT EXISTS (SELECT 1 FROM webhook_event_types c WHERE c.name = t)
        AND EXISTS (SELECT 1 FROM webhook_event_types)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'webhook endpoint % subscribes to event type %, which is not in the catalog (webhook_event_types)', endpoint, unknown
            USING ERRCODE = 'check_violation', CONSTRAINT = 'webhook_event_types_subscribed';
    END IF;
END
$$;
-- +goose StatementEnd

-- An endpoint created or re-subscribed: a row trigger, AFTER the change
-- (see migration 00030: a BEFORE row trigger would change how every
-- endpoint UPDATE locks), and only when event_types is written.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_endpoints_subscribed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_event_types_require(NEW.id, NEW.event_types);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER webhook_endpoints_subscribed AFTER INSERT OR UPDATE OF event_types ON webhook_endpoints
    FOR EACH ROW WHEN (cardinality(NEW.event_types) > 0)
    EXECUTE FUNCTION webhook_endpoints_subscribed();

-- The catalog changed: every endpoint's subscriptions must still be in it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_event_types_subscribed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_event_types_require(id, event_types) FROM webhook_endpoints WHERE cardinality(event_types) > 0;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER webhook_event_types_subscribed AFTER INSERT OR UPDATE OR DELETE ON webhook_event_types
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_event_types_subscribed();

-- +goose Down
DROP TRIGGER IF EXISTS webhook_event_types_subscribed ON webhook_event_types;
DROP FUNCTION IF EXISTS webhook_event_types_subscribed();
DROP TRIGGER IF EXISTS webhook_endpoints_subscribed ON webhook_endpoints;
DROP FUNCTION IF EXISTS webhook_endpoints_subscribed();
DROP FUNCTION IF EXISTS webhook_event_types_require(uuid, text[]);
DROP TABLE IF EXISTS webhook_event_types;
