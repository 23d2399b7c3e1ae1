-- +goose NO TRANSACTION
-- +goose Up
-- Cancel: a pending email_outbox or webhook_outbox row can be withdrawn
-- before it is sent (outbox.Cancel, webhook.Cancel, worker cancel; see
-- docs/OPERATIONS.md, "Scheduled sends and cancel"). A cancelled row is
-- terminal like dispatched, skipped and failed: it is never claimed (the
-- claim index holds pending rows only), an email keeps its record forever
-- with its secret keys scrubbed as a skipped one's are, and a webhook row
-- ages out with the pruner like a dispatched one.
--
-- cancelled_at and cancelled_by are set exactly when the status is
-- cancelled (the *_cancelled_check constraints). Each new status CHECK is
-- added NOT VALID and validated apart before the old one goes, so there
-- is never a moment with neither and no write waits for the scan.
ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS cancelled_at timestamptz;
ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS cancelled_by text;
ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS cancelled_at timestamptz;
ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS cancelled_by text;

ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_status_values;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_status_values
    CHECK (status IN ('pending', 'dispatched', 'skipped', 'failed', 'cancelled')) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_status_values;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_status_check;

ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_status_values;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_status_values
    CHECK (status IN ('pending', 'dispatched', 'failed', 'cancelled')) NOT VALID;
ALTER TABLE webhook_outbox VALIDATE CONSTRAINT webhook_outbox_status_values;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_status_check;

-- cancelled_by is who asked (the console's user, worker cancel's --by, or
-- sql:<role>), at most 200 bytes like email_requeues.actor.
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_cancelled_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_cancelled_check
    CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL)
       AND (status = 'cancelled') = (cancelled_by IS NOT NULL)
       AND (cancelled_by IS NULL OR (cancelled_by <> '' AND octet_length(cancelled_by) <= 200))) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_cancelled_check;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_cancelled_check;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_cancelled_check
    CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL)
       AND (status = 'cancelled') = (cancelled_by IS NOT NULL)
       AND (cancelled_by IS NULL OR (cancelled_by <> '' AND octet_length(cancelled_by) <= 200))) NOT VALID;
ALTER TABLE webhook_outbox VALIDATE CONSTRAINT webhook_outbox_cancelled_check;

-- The pruner deletes cancelled webhook_outbox rows past the retention as
-- it deletes dispatched ones, by this index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_outbox_cancelled_idx ON webhook_outbox (cancelled_at) WHERE status = 'cancelled';

-- A cancelled row is final. An UPDATE that moves one to another status —
-- a requeue run by hand in psql — is refused with a message saying so,
-- rather than by the cancelled CHECK or by email_requeues' from_status
-- CHECK (the requeue trigger, which fires after this one: triggers fire
-- in name order). An email's secret keys are gone; send a new one.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_cancelled_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% row % was cancelled at % by %: a cancelled row is final; enqueue a new one instead',
        TG_TABLE_NAME, OLD.id, OLD.cancelled_at, OLD.cancelled_by
        USING ERRCODE = 'check_violation', CONSTRAINT = TG_TABLE_NAME || '_cancelled_final';
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS email_outbox_cancelled_final ON email_outbox;
CREATE TRIGGER email_outbox_cancelled_final BEFORE UPDATE OF status ON email_outbox
    FOR EACH ROW WHEN (OLD.status = 'cancelled' AND NEW.status <> 'cancelled')
    EXECUTE FUNCTION postbox_cancelled_final();
DROP TRIGGER IF EXISTS webhook_outbox_cancelled_final ON webhook_outbox;
CREATE TRIGGER webhook_outbox_cancelled_final BEFORE UPDATE OF status ON webhook_outbox
    FOR EACH ROW WHEN (OLD.status = 'cancelled' AND NEW.status <> 'cancelled')
    EXECUTE FUNCTION postbox_cancelled_final();

-- +goose Down
-- The statuses before this migration have no 'cancelled'. Going down keeps
-- every row and turns each cancelled one into the old status nearest in
-- meaning, with last_error saying what it was: an email becomes skipped
-- (terminal, never sent, its secret keys already scrubbed), a webhook row
-- failed ("do not requeue": a requeue would fan the cancelled event out).
DROP TRIGGER IF EXISTS webhook_outbox_cancelled_final ON webhook_outbox;
DROP TRIGGER IF EXISTS email_outbox_cancelled_final ON email_outbox;
DROP FUNCTION IF EXISTS postbox_cancelled_final();
UPDATE email_outbox SET status = 'skipped', cancelled_at = NULL, cancelled_by = NULL,
    last_error = left(format('cancelled at %s by %s (migration 00016 rolled back)', cancelled_at, cancelled_by), 2000)
WHERE status = 'cancelled';
UPDATE webhook_outbox SET status = 'failed', cancelled_at = NULL, cancelled_by = NULL,
    last_error = left(format('cancelled at %s by %s (migration 00016 rolled back): do not requeue', cancelled_at, cancelled_by), 2000)
WHERE status = 'cancelled';
DROP INDEX CONCURRENTLY IF EXISTS webhook_outbox_cancelled_idx;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_cancelled_check;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_cancelled_check;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_status_check;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_status_check
    CHECK (status IN ('pending', 'dispatched', 'failed')) NOT VALID;
ALTER TABLE webhook_outbox VALIDATE CONSTRAINT webhook_outbox_status_check;
ALTER TABLE webhook_outbox DROP CONSTRAINT IF EXISTS webhook_outbox_status_values;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_status_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_status_check
    CHECK (status IN ('pending', 'dispatched', 'skipped', 'failed')) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_status_check;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_status_values;
ALTER TABLE webhook_outbox DROP COLUMN IF EXISTS cancelled_by;
ALTER TABLE webhook_outbox DROP COLUMN IF EXISTS cancelled_at;
ALTER TABLE email_outbox DROP COLUMN IF EXISTS cancelled_by;
ALTER TABLE email_outbox DROP COLUMN IF EXISTS cancelled_at;
