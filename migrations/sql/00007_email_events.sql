-- +goose Up
-- Issue 16: delivery events flow back, suppressions manage themselves.
--
-- email_events is what providers (and the relay's own replies) said about a
-- sent email after the transport was done with it: delivered, bounced,
-- complained, deferred. It never changes email_outbox.status — dispatched
-- stays the CAS-marked transport state (see docs/design/outbox-transport.md,
-- Detached marks) — and the read APIs return both. An event whose row cannot
-- be found is kept with row_id NULL (an orphan) and the correlation key it
-- carried in ref, so nothing a provider reported is dropped.
--
-- The limits are the Go API's constants (outbox/events.go); tests compare:
--   outbox.MaxEventExcerptBytes = 4096
--   outbox.maxEventTextBytes    = 1024 (detail, ref, provider ids, recipient)
CREATE TABLE email_events (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    row_id              uuid,
    ref                 text        NOT NULL DEFAULT '' CHECK (octet_length(ref) <= 1024),
    type                text        NOT NULL CHECK (type IN ('delivered', 'bounced', 'complained', 'deferred')),
    bounce_class        text        CHECK (bounce_class IN ('hard', 'soft')),
    provider            text        NOT NULL CHECK (provider ~ '^[a-z][a-z0-9_-]{0,31}$'),
    provider_event_id   text        NOT NULL CHECK (octet_length(provider_event_id) BETWEEN 1 AND 1024),
    provider_message_id text        NOT NULL DEFAULT '' CHECK (octet_length(provider_message_id) <= 1024),
    recipient           text        NOT NULL DEFAULT '' CHECK (recipient = lower(recipient) AND octet_length(recipient) <= 1024),
    detail              text        NOT NULL DEFAULT '' CHECK (octet_length(detail) <= 1024),
    raw_excerpt         text        NOT NULL DEFAULT '' CHECK (octet_length(raw_excerpt) <= 4096),
    occurred_at         timestamptz,
    received_at         timestamptz NOT NULL DEFAULT now(),
    -- A bounce has a class; nothing else does.
    CHECK ((type = 'bounced') = (bounce_class IS NOT NULL)),
    -- A replayed or duplicate provider event is recorded once.
    UNIQUE (provider, provider_event_id)
);

-- Serves EventsFor (a row's timeline) and the provider-message-id fallback.
CREATE INDEX email_events_row_idx ON email_events (row_id, received_at) WHERE row_id IS NOT NULL;
CREATE INDEX email_events_provider_message_idx ON email_events (provider, provider_message_id)
    WHERE provider_message_id <> '' AND row_id IS NOT NULL;
-- Serves the soft-bounce count within the window.
CREATE INDEX email_events_soft_bounce_idx ON email_events (recipient, received_at)
    WHERE type = 'bounced' AND bounce_class = 'soft';
-- Serves the orphan listing.
CREATE INDEX email_events_orphan_idx ON email_events (received_at DESC) WHERE row_id IS NULL;

-- Suppressions say where they came from: the operator, a hard bounce, a
-- complaint, the relay's own permanent reply naming the mailbox, or
-- repeated soft bounces, and which row's send or event caused them.
ALTER TABLE email_suppressions
    ADD COLUMN source     text NOT NULL DEFAULT 'manual'
                          CHECK (source IN ('manual', 'hard_bounce', 'complaint', 'smtp_reply', 'soft_bounces')),
    ADD COLUMN source_row uuid,
    ADD COLUMN created_by text NOT NULL DEFAULT '' CHECK (octet_length(created_by) <= 200);
ALTER TABLE email_suppressions ADD CONSTRAINT email_suppressions_reason_size
    CHECK (octet_length(reason) <= 1024) NOT VALID;

-- Every addition and lifting, with who did it: the console and the CLI lift
-- suppressions, and "who let this address through again" must have an answer.
CREATE TABLE email_suppression_log (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email      text        NOT NULL CHECK (email = lower(email) AND email <> ''),
    action     text        NOT NULL CHECK (action IN ('added', 'lifted')),
    source     text        NOT NULL DEFAULT '',
    reason     text        NOT NULL DEFAULT '' CHECK (octet_length(reason) <= 1024),
    source_row uuid,
    actor      text        NOT NULL DEFAULT '' CHECK (octet_length(actor) <= 200),
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_suppression_log_email_idx ON email_suppression_log (email, at DESC);

-- +goose Down
DROP TABLE email_suppression_log;
ALTER TABLE email_suppressions DROP CONSTRAINT email_suppressions_reason_size;
ALTER TABLE email_suppressions DROP COLUMN created_by, DROP COLUMN source_row, DROP COLUMN source;
DROP TABLE email_events;
