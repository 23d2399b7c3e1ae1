-- +goose Up
-- A webhook endpoint that has never accepted a delivery is not trusted
-- with a burst. Without this, each replica's fan-out sent a first attempt
-- from every free slot before any failure was counted: to a new endpoint
-- answering every request with a 500, 40 to 58 first attempts from three
-- replicas before its breaker opened.
--
-- proven_at is when the endpoint first accepted a delivery (NULL until
-- then). unproven_births counts the deliveries fanned out to it leased
-- while it was unproven: the fan-outs of every replica lock the endpoint
-- row to count them, and those past WEBHOOK_CONCURRENCY are born held,
-- for the retry lane's admission, which lets first attempts out only
-- while fewer than WEBHOOK_CONCURRENCY of its deliveries are attempted and
-- unresolved (webhook/throttle.go, "unproven").
--
-- Endpoints from before this migration were in use: they are taken as
-- proven. The column is added with now() as its default, which fills the
-- existing rows without an UPDATE — an UPDATE would check every CHECK
-- constraint again, and a row from before a rule (00006's url rules, left
-- NOT VALID) would fail the upgrade — and the default is dropped at once,
-- so endpoints created from now on start unproven.
ALTER TABLE webhook_endpoints
    ADD COLUMN IF NOT EXISTS proven_at timestamptz DEFAULT now(),
    ADD COLUMN IF NOT EXISTS unproven_births integer NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints
    ALTER COLUMN proven_at DROP DEFAULT;
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT IF EXISTS webhook_endpoints_unproven_births_check,
    ADD CONSTRAINT webhook_endpoints_unproven_births_check CHECK (unproven_births >= 0);

-- +goose Down
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT IF EXISTS webhook_endpoints_unproven_births_check,
    DROP COLUMN IF EXISTS unproven_births,
    DROP COLUMN IF EXISTS proven_at;
