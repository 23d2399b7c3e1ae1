-- +goose Up
-- An event keeps the endpoint it was addressed to. A webhook_outbox row
-- with endpoint_id goes to that endpoint only; its event recorded nothing
-- of it, so a replay, once the pruner had deleted the dispatched row
-- (WEBHOOK_OUTBOX_RETENTION), went to every endpoint subscribed to the
-- type. The fan-out now copies the row's endpoint_id onto its event, and
-- a replay goes where the original went. NULL: every subscribed endpoint,
-- as before. No foreign key, as on webhook_outbox: ON DELETE SET NULL
-- would turn an addressed event into a broadcast.
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS endpoint_id uuid;

-- Events fanned out before this from rows still kept learn their
-- addressing from the row; addressed rows are few (the operator notices,
-- Event.EndpointID), and outbox_id is unique, so this reads little.
UPDATE webhook_events e SET endpoint_id = o.endpoint_id
FROM webhook_outbox o
WHERE o.endpoint_id IS NOT NULL AND e.outbox_id = o.id AND e.endpoint_id IS NULL;

-- +goose Down
ALTER TABLE webhook_events DROP COLUMN IF EXISTS endpoint_id;
