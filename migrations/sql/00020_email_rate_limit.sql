-- +goose NO TRANSACTION
-- +goose Up
-- A pool-wide email send rate (EMAIL_RATE_LIMIT), and relay throttling
-- that does not spend a row's retry budget.
--
-- postbox_rate_buckets holds one token bucket per pool-wide limit, by name
-- ('email'): the tokens left when it was last taken from, and when. Every
-- replica's email claim locks the row, refills it for the time since at
-- the rate that claimer was configured with (each claim passes its own:
-- the row stores no rate, so replicas that disagree for the length of a
-- deploy refill at their own rates and nothing else changes), claims at
-- most as many rows as there are whole tokens and takes one per row, in
-- the claim's own transaction (internal/claim/bucket.go). The row is
-- made here and again by a claim that finds it missing.
--
-- email_outbox.throttles counts the attempts since the row's last requeue
-- that the relay refused for its sending rate (421, 451 4.7.x, SES's 454
-- Throttling): they are retried within seconds and do not count toward
-- the retry budget, which is attempts - throttles. A requeue, which resets
-- attempts, resets it too (the trigger below, so plain SQL does as well).
-- Adding the column with a constant default rewrites nothing; its CHECK
-- is validated apart, as in 00012.
CREATE TABLE IF NOT EXISTS postbox_rate_buckets (
    name   text             PRIMARY KEY CHECK (name <> ''),
    tokens double precision NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    at     timestamptz      NOT NULL DEFAULT now()
);
INSERT INTO postbox_rate_buckets (name) VALUES ('email') ON CONFLICT DO NOTHING;

ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS throttles integer NOT NULL DEFAULT 0;
ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_throttles_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_throttles_check CHECK (throttles >= 0) NOT VALID;
ALTER TABLE email_outbox VALIDATE CONSTRAINT email_outbox_throttles_check;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION postbox_email_throttles_reset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.throttles := 0;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- Only an update that lowers attempts (a requeue) runs it: a claim raises
-- attempts, and its WHEN is all it costs.
DROP TRIGGER IF EXISTS email_outbox_throttles_reset ON email_outbox;
CREATE TRIGGER email_outbox_throttles_reset BEFORE UPDATE OF attempts ON email_outbox
    FOR EACH ROW WHEN (NEW.attempts < OLD.attempts)
    EXECUTE FUNCTION postbox_email_throttles_reset();

-- +goose Down
DROP TRIGGER IF EXISTS email_outbox_throttles_reset ON email_outbox;
DROP FUNCTION IF EXISTS postbox_email_throttles_reset();
ALTER TABLE email_outbox DROP COLUMN IF EXISTS throttles;
DROP TABLE IF EXISTS postbox_rate_buckets;
