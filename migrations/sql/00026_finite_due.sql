-- +goose NO TRANSACTION
-- +goose Up
-- Due times are finite. timestamptz admits 'infinity' and '-infinity',
-- and a plain-SQL row holding one was accepted: due since '-infinity' or
-- never due, it stayed pending for ever, and now() minus it is an error,
-- which failed worker stats and every scrape of the postbox_outbox_*
-- gauges (the stall and failed-rows alerts went silent for all three
-- outboxes). The readers now survive such a row (claim.Table.ReadDueSQL,
-- claim.FiniteTime); from here the tables refuse one.
--
-- Each CHECK is added NOT VALID first, a moment's lock, so no new
-- non-finite time arrives while the rows already there are fixed; then
-- VALIDATE reads the table without blocking enqueues, claims or marks.
-- This migration runs outside a transaction so no statement holds its
-- lock past itself. What happens to a row that holds one:
--   * pending and due since '-infinity' ("as early as can be"): due now;
--   * pending and due at 'infinity' (never): failed, with last_error
--     saying why, so it shows in worker failed and the failed gauge
--     rather than being sent unasked; a requeue sends it;
--   * in any other status, the time no longer matters: it becomes the
--     row's created_at.
-- Finding them reads each table once more (no index holds them). Should
-- one of them also break a rule migration 00006 left NOT VALID, its
-- UPDATE is refused naming that rule and the migration stops: delete or
-- fix the row, then run migrate up again (every step here can run twice).
-- postbox_finite_due fixes one table's rows as above; the requeue its
-- reason names is what sends the row.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_finite_due(tbl regclass, col text, requeue text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format($u$UPDATE %1$s SET
        status = CASE WHEN status = 'pending' AND %2$I = 'infinity' THEN 'failed' ELSE status END,
        last_error = CASE WHEN status = 'pending' AND %2$I = 'infinity'
            THEN 'refused by migration 00026: ' || %2$L || ' was infinity, a due time that never comes; ' || %3$L
            ELSE last_error END,
        %2$I = CASE WHEN status = 'pending' THEN now() ELSE created_at END
    WHERE NOT isfinite(%2$I)$u$, tbl, col, requeue);
END
$$;
-- +goose StatementEnd

ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_next_attempt_at_finite;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_next_attempt_at_finite
    CHECK (isfinite(next_attempt_at)) NOT VALID;
SELECT postbox_finite_due('email_outbox', 'next_attempt_at', 'worker requeue email <id> sends it now');
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_next_attempt_at_finite;

ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_next_attempt_at_finite;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_next_attempt_at_finite
    CHECK (isfinite(next_attempt_at)) NOT VALID;
SELECT postbox_finite_due('webhook_outbox', 'next_attempt_at', 'worker requeue webhook <id> fans it out now');
ALTER TABLE webhook_outbox VALIDATE CONSTRAINT webhook_outbox_next_attempt_at_finite;

-- A delivery's due time is written by the fan-out and the marks, but an
-- operator's SQL reaches it too. NULL stays allowed: the legacy branch.
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_next_retry_at_finite;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_next_retry_at_finite
    CHECK (isfinite(next_retry_at)) NOT VALID;
SELECT postbox_finite_due('webhook_deliveries', 'next_retry_at', 'worker requeue delivery <id> sends it now');
ALTER TABLE webhook_deliveries VALIDATE CONSTRAINT webhook_deliveries_next_retry_at_finite;

DROP FUNCTION postbox_finite_due(regclass, text, text);

-- +goose Down
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_next_retry_at_finite;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_next_attempt_at_finite;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_next_attempt_at_finite;
