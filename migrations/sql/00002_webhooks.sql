-- +goose Up
CREATE TABLE webhook_endpoints (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    url             text        NOT NULL CHECK (url ~ '^https?://'),
    -- Standard Webhooks secret: whsec_ + base64 of the key bytes.
    secret          text        NOT NULL CHECK (secret LIKE 'whsec\_%'),
    event_types     text[]      NOT NULL DEFAULT '{}', -- empty = every event type
    enabled         boolean     NOT NULL DEFAULT true,
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Transport intent: one row per event to fan out. Safe to prune once
-- dispatched; webhook_events and webhook_deliveries are the record.
CREATE TABLE webhook_outbox (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_type      text        NOT NULL CHECK (event_type <> ''),
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'dispatched', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    dispatched_at   timestamptz
);
CREATE INDEX webhook_outbox_claim_idx ON webhook_outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_outbox_prune_idx ON webhook_outbox (dispatched_at) WHERE status = 'dispatched';

CREATE TABLE webhook_events (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_type text        NOT NULL CHECK (event_type <> ''),
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The producing outbox row. UNIQUE makes "exactly one event per outbox
    -- row" a database fact; no foreign key, because outbox rows are pruned.
    outbox_id  uuid        UNIQUE,
    -- The event this one replays, if any.
    replay_of  uuid        REFERENCES webhook_events (id)
);
CREATE INDEX webhook_events_replay_of_idx ON webhook_events (replay_of) WHERE replay_of IS NOT NULL;

CREATE TABLE webhook_deliveries (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id      uuid        NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    endpoint_id   uuid        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    status        text        NOT NULL DEFAULT 'pending'
                              CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts      integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- Nullable only for rows written before deliveries were born leased (see
    -- docs/design/outbox-transport.md, Deliveries written before leases);
    -- every row born since is leased.
    next_retry_at timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    delivered_at  timestamptz,
    UNIQUE (event_id, endpoint_id)
);
-- Serves the retry claim, including the legacy NULL branch.
CREATE INDEX webhook_deliveries_claim_idx ON webhook_deliveries (next_retry_at NULLS FIRST) WHERE status = 'pending';
-- Serves "replay every failed delivery of one endpoint since T".
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, created_at);

-- One row per HTTP attempt: what the receiver answered and how long it took.
CREATE TABLE webhook_delivery_attempts (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id      uuid        NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt          integer     NOT NULL CHECK (attempt >= 1),
    status_code      integer     CHECK (status_code BETWEEN 100 AND 599),
    duration_ms      integer     NOT NULL CHECK (duration_ms >= 0),
    error            text,
    response_excerpt text        CHECK (octet_length(response_excerpt) <= 4096),
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_delivery_attempts_delivery_idx ON webhook_delivery_attempts (delivery_id, created_at);

-- +goose Down
DROP TABLE webhook_delivery_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_events;
DROP TABLE webhook_outbox;
DROP TABLE webhook_endpoints;
