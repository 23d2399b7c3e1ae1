-- +goose NO TRANSACTION
-- +goose Up
-- The trace a row was written in.
--
-- Enqueue records the W3C trace context of the caller's transaction in
-- traceparent, and the spans postbox starts for the row — each send
-- attempt, each webhook attempt, each mark — take it as their parent, so
-- one trace follows an invoice from the request that wrote its outbox row
-- to the relay's reply and each receiver's answer. Plain SQL may set it
-- too; NULL is a row with no parent. The fan-out copies a webhook_outbox
-- row's traceparent to its event, which every delivery reads.
--
-- The format is the W3C header's (version 00: 2-32-16-2 lowercase hex);
-- the CHECK holds plain SQL to what Enqueue writes. Nullable columns
-- without a default rewrite nothing; each CHECK is added NOT VALID and
-- validated apart.
--
-- send_traceparent is an endpoint's choice to receive the attempt's trace
-- context as a traceparent header. Off by default: it is a header the
-- receiver sees, and it tells the receiver something about the sender.
ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS send_traceparent boolean NOT NULL DEFAULT false;

ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_traceparent_format;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_traceparent_format
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_traceparent_format;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_traceparent_format;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_traceparent_format
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
ALTER TABLE webhook_outbox VALIDATE CONSTRAINT webhook_outbox_traceparent_format;
ALTER TABLE webhook_events DROP CONSTRAINT IF EXISTS webhook_events_traceparent_format;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_traceparent_format
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
ALTER TABLE webhook_events VALIDATE CONSTRAINT webhook_events_traceparent_format;

-- +goose Down
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS send_traceparent;
ALTER TABLE webhook_events DROP COLUMN IF EXISTS traceparent;
ALTER TABLE webhook_outbox DROP COLUMN IF EXISTS traceparent;
ALTER TABLE email_outbox DROP COLUMN IF EXISTS traceparent;
