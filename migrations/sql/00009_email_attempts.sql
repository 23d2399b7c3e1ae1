-- +goose Up
-- Issue 14: an email row's history, one row per recorded attempt.
--
-- email_outbox keeps the count, the last error and the next attempt's
-- time; the operator asking "what happened to invoice X's email?" needs
-- each attempt's time and outcome. Every CAS mark appends its attempt here
-- in the same statement (outbox/mark.go), so the log costs no round trip
-- and cannot disagree with the row: a mark that is not applied (stale)
-- logs nothing. An attempt the row counts but the log lacks is one whose
-- worker died, or whose lease ran out, before it could mark.
--
-- attempt is the claim's number (attempts after the claim); the exported
-- Mark functions, which hold no claim, log the row's current count. A
-- second mark of the same attempt (a stale worker's retry mark, which the
-- pending-only guard lets through) is dropped by the primary key.
CREATE TABLE email_attempts (
    row_id  uuid        NOT NULL REFERENCES email_outbox (id) ON DELETE CASCADE,
    attempt integer     NOT NULL CHECK (attempt >= 0),
    outcome text        NOT NULL CHECK (outcome IN ('sent', 'skipped', 'failed', 'retry')),
    error   text        CHECK (octet_length(error) <= 2000), -- pgtext.MaxLastError
    at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (row_id, attempt)
);

-- +goose Down
DROP TABLE email_attempts;
