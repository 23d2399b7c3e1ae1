-- +goose Up
-- Issue 13: plain SQL meets the Go API's rules (points 5 and 7).
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
-- The limits are the Go API's constants; tests compare them:
--   webhook.DefaultMaxPayloadBytes = 262144 (JSON text, as stored)
--   webhook maxEventTypeLen        = 200 bytes, no control character or space
--   outbox.MaxStoredPayloadBytes   = 10485760 + 65536 (jsonb size, see below)

-- Endpoint URLs: no userinfo (net/http sends it as Authorization: Basic,
-- and the listing would print it), no fragment. The scheme rule is 00002's.
UPDATE webhook_endpoints
SET enabled = false, updated_at = now(),
    disabled_reason = 'url carries credentials or a fragment, which postbox no longer sends (migration 00006); fix the url, then enable'
WHERE enabled AND (url ~ '^[^:/?#]+://[^/?#]*@' OR url ~ '#');
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_url_rules
    CHECK (url !~ '^[^:/?#]+://[^/?#]*@' AND url !~ '#') NOT VALID;

-- Webhook events: the event type as validateEventType has it (1 to 200
-- bytes, nothing at or below space, no DEL; <> '' is 00002's), and the
-- payload at most DefaultMaxPayloadBytes of JSON text as jsonb prints it.
UPDATE webhook_outbox
SET status = 'failed',
    last_error = 'refused by migration 00006: event_type must be 1-200 printable bytes without spaces, payload at most 262144 bytes of JSON text'
WHERE status = 'pending'
  AND (octet_length(event_type) > 200 OR event_type ~ '[\x01-\x20\x7f]' OR octet_length(payload::text) > 262144);
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_event_type_format
    CHECK (octet_length(event_type) <= 200 AND event_type !~ '[\x01-\x20\x7f]') NOT VALID;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_payload_size
    CHECK (octet_length(payload::text) <= 262144) NOT VALID;

-- Email payloads: at most outbox.MaxStoredPayloadBytes as stored jsonb.
-- pg_column_size, not octet_length(payload::text): a CHECK runs on every
-- UPDATE, and the claim and the marks UPDATE every row; pg_column_size of
-- an unchanged, TOASTed payload reads its header only, where printing it
-- would decompress megabytes per claim. On INSERT (and on a mark that
-- writes a new payload) the value is not yet compressed, so it measures the
-- document's full jsonb size. The 64 KiB above Enqueue's 10 MiB limit (of
-- JSON text, before sealing) is room for jsonb's framing and for the
-- envelopes a seal mark writes over a waiting row's secret fields, so no
-- mark is ever refused for a payload Enqueue accepted.
-- The clean-up measures the text too: a stored payload is compressed, and
-- a 20 MB document of repeated text is small on disk but not to send.
UPDATE email_outbox
SET status = 'failed',
    last_error = 'refused by migration 00006: payload over 10551296 bytes (outbox.MaxStoredPayloadBytes)'
WHERE status = 'pending' AND (pg_column_size(payload) > 10551296 OR octet_length(payload::text) > 10551296);
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_payload_size
    CHECK (pg_column_size(payload) <= 10551296) NOT VALID;

-- +goose Down
ALTER TABLE email_outbox DROP CONSTRAINT email_outbox_payload_size;
ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_payload_size;
ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_event_type_format;
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_url_rules;
