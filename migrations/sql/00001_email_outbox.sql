-- +goose Up
-- The email outbox (see docs/design/outbox-transport.md, Claim and
-- lease). Column names are a public contract: other languages enqueue with a
-- plain INSERT (kind, customer_id, payload).
CREATE TABLE email_outbox (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind            text        NOT NULL DEFAULT 'raw'
                                CHECK (kind IN ('raw', 'invoice', 'password_reset', 'member_invite')),
    customer_id     text        NOT NULL DEFAULT '',
    invoice_id      text,
    payload         jsonb       NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'dispatched', 'skipped', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    dispatched_at   timestamptz,
    CHECK ((status = 'dispatched') = (dispatched_at IS NOT NULL) OR status = 'skipped')
);

-- Serves the claim: pending and due, oldest due first.
CREATE INDEX email_outbox_claim_idx ON email_outbox (next_attempt_at) WHERE status = 'pending';
-- Serves ListByCustomer (30-day read window) and ListByInvoice (no age bound).
CREATE INDEX email_outbox_customer_idx ON email_outbox (customer_id, created_at DESC);
CREATE INDEX email_outbox_invoice_idx ON email_outbox (invoice_id, created_at DESC) WHERE invoice_id IS NOT NULL;
-- Serves the operator's view of failed rows.
CREATE INDEX email_outbox_failed_idx ON email_outbox (created_at DESC) WHERE status = 'failed';

-- Recipients that must not be mailed (bounces, complaints, unsubscribes).
-- Addresses are stored lower-cased so the lookup is one index probe.
CREATE TABLE email_suppressions (
    email      text        PRIMARY KEY CHECK (email = lower(email) AND email <> ''),
    reason     text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE email_suppressions;
DROP TABLE email_outbox;
