-- +goose Up
-- The tenant portal (docs/OPERATIONS.md, The tenant portal): the page a
-- SaaS's customer opens from the application to manage its own webhook
-- endpoints.
--
-- An endpoint gains a description its tenant writes for itself (the
-- receiving service's name, who to call). Bounded as the catalog's
-- descriptions are.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS description text NOT NULL DEFAULT '';
ALTER TABLE webhook_endpoints DROP CONSTRAINT IF EXISTS webhook_endpoints_description_size;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_description_size
    CHECK (octet_length(description) <= 4096);

-- A portal link is signed and short-lived, and exchanged once: its nonce
-- is written here by the exchange, and a second exchange of the same link
-- finds it and is refused. A row is needed only until its link expires;
-- each exchange deletes a few expired ones, so the table holds about the
-- links of the last link lifetime.
CREATE TABLE IF NOT EXISTS portal_link_uses (
    nonce      text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    used_at    timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS portal_link_uses_expires_idx ON portal_link_uses (expires_at);

-- Every tenant action in the portal, for the operator: who (the tenant and
-- its portal session), what, on which target, when. Written in the
-- transaction of the change it records, so neither exists without the
-- other.
CREATE TABLE IF NOT EXISTS portal_audit (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    tenant_id text        NOT NULL,
    session   text        NOT NULL,
    action    text        NOT NULL,
    target    text        NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS portal_audit_tenant_idx ON portal_audit (tenant_id, at DESC);

-- +goose Down
DROP TABLE IF EXISTS portal_audit;
DROP TABLE IF EXISTS portal_link_uses;
ALTER TABLE webhook_endpoints DROP CONSTRAINT IF EXISTS webhook_endpoints_description_size;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS description;
