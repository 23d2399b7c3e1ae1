-- +goose Up
-- Issue 13: plain SQL meets the Go API's rules (point 5).
--
-- Every constraint is added NOT VALID: existing rows are not checked, so the
-- migration cannot fail on a deployment that already holds a row the rules
-- now refuse, and it takes no long scan of email_outbox. New rows, and every
-- later UPDATE of a row, are checked. Because an UPDATE of an existing
-- violator would then fail — and the claims and marks UPDATE pending rows,
-- a batch at a time — each pending violator is first failed (or, for an
-- endpoint, disabled) here, with the reason in last_error, so no claim or
-- mark ever touches one. Violators that are not pending stay as they are;
-- requeueing one is refused with the constraint's name until it is fixed.
-- After cleaning up, an operator may run
--   ALTER TABLE … VALIDATE CONSTRAINT …
-- to make the rule hold for every row.
--
-- Endpoint URLs: no userinfo (net/http sends it as Authorization: Basic,
-- and the listing would print it), no fragment. The scheme rule is 00002's.
UPDATE webhook_endpoints
SET enabled = false, updated_at = now(),
    disabled_reason = 'url carries credentials or a fragment, which postbox no longer sends (migration 00006); fix the url, then enable'
WHERE enabled AND (url ~ '^[^:/?#]+://[^/?#]*@' OR url ~ '#');
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_url_rules
    CHECK (url !~ '^[^:/?#]+://[^/?#]*@' AND url !~ '#') NOT VALID;

-- +goose Down
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_url_rules;
