-- +goose Up
-- History bounded by partition (see docs/OPERATIONS.md, Sizing and
-- retention, and docs/design/outbox-transport.md, History partitions).
--
-- The three append-only logs grow with every message and every attempt:
-- email_attempts (one row per mark), email_events (one per provider
-- report) and webhook_delivery_attempts (one per HTTP request). Deleting
-- months of them row by row is what hangs every peer's retention (a
-- DELETE of millions of rows holds its snapshot, bloats the table and
-- falls behind), so each becomes a table partitioned by week on its time
-- column and retention drops whole weeks: the maintenance pass
-- (jobs.HistoryArgs) detaches a week wholly past its retention
-- CONCURRENTLY, which does not block the marks writing this week, and
-- drops it, which touches nothing but that week.
--
-- There is no default partition: one would catch every row with no week
-- of its own, grow forever, and make DETACH ... CONCURRENTLY impossible.
-- Weeks are made ahead instead: this migration makes the current one and
-- the four after it, every replica makes them again at boot, and the pass
-- keeps four weeks ahead every hour (postbox_history_partitions).
--
-- An installation with history keeps it without a rewrite: its table
-- becomes the first partition, <table>_legacy, bounded below by nothing
-- and above by the week after its newest row, and is dropped whole once
-- that bound is past retention. Its indexes become the new table's (they
-- have the same definitions), so nothing is rebuilt; the attach checks
-- its rows against the bound in one scan under this migration's lock. An
-- empty table is simply replaced.
--
-- A unique index on a partitioned table must hold the partition key, so
-- what the unpartitioned tables kept unique is kept unique per week
-- instead, by an index on each week (made here and by the function): a
-- row's attempt logged twice (ON CONFLICT DO NOTHING, outbox/mark.go) and
-- a provider event recorded twice (outbox/events.go). The statements that
-- rely on it also look for the key in the other weeks, so only two
-- writers racing across a week's boundary could both insert.
--
-- The partitioned logs hold no foreign key to the rows they log.
-- Attaching a week with one, or dropping a week with one, locks the
-- referenced table (email_outbox, webhook_deliveries) against every claim
-- and mark, and a long transaction that read it (a report, pg_dump) would
-- keep the weekly make and drop waiting or failing. Only postbox's marks
-- write the logs, from the row they have just updated; a row deleted by
-- hand leaves its log behind until retention drops its week, and readers
-- look the log up by the row, so they never see it.
--
-- The rows' other tables stay unpartitioned: email_outbox is the delivery
-- record and is kept (docs/design/outbox-transport.md, Retention);
-- webhook_deliveries holds the index the retry claim reads, which
-- partitions would split into one per week, and webhook_events is
-- referenced by it, by replays and by every attempt, through ids that
-- carry no time. The history pass deletes webhook events past
-- WEBHOOK_HISTORY_RETENTION whose deliveries are all final, in chunks,
-- oldest first (webhook_events_created_idx, migration 00019), their
-- deliveries with them. The suppression and requeue logs grow with
-- bounces and operator actions, not with messages.

-- postbox_history_partitions makes the weekly partitions of a history
-- table from the week holding from_at through the week holding to_at that
-- do not exist yet, and returns how many it made. Each week is made as a
-- table of its own and then attached, which locks the parent only against
-- other schema changes (SHARE UPDATE EXCLUSIVE), not against the marks
-- writing it; callers bound the wait with lock_timeout. Concurrent callers
-- (replicas booting together) take turns on a transaction-scoped advisory
-- lock, which works through PgBouncer in transaction mode. A week already
-- covered by the legacy partition is skipped.
-- +goose StatementBegin
CREATE FUNCTION postbox_history_partitions(parent regclass, from_at timestamptz, to_at timestamptz)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    rel     text;
    week    timestamptz;
    part    text;
    made    integer := 0;
BEGIN
    SELECT relname INTO STRICT rel FROM pg_class WHERE oid = parent AND relkind = 'p';
    IF rel NOT IN ('email_attempts', 'email_events', 'webhook_delivery_attempts') THEN
        RAISE EXCEPTION 'postbox_history_partitions: % is not a postbox history table', rel;
    END IF;
    IF to_at - from_at > interval '3 years' THEN
        RAISE EXCEPTION 'postbox_history_partitions: % to % is more than three years of weeks', from_at, to_at;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('postbox_history_partitions'), parent::oid::integer);
    week := date_trunc('week', from_at, 'UTC');
    WHILE week <= to_at LOOP
        part := rel || '_w' || to_char(week AT TIME ZONE 'UTC', 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)', part, rel);
                CASE rel
                WHEN 'email_attempts' THEN
                    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (row_id, attempt)', part || '_key', part);
                WHEN 'email_events' THEN
                    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (provider, provider_event_id)', part || '_key', part);
                    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (id)', part || '_id', part);
                ELSE
                    NULL; -- webhook_delivery_attempts: its identity is unique by construction and read by delivery
                END CASE;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                    rel, part, week, week + interval '1 week');
                made := made + 1;
            EXCEPTION WHEN invalid_object_definition THEN
                -- 42P17: the week overlaps a partition that already
                -- exists (the legacy one); the subtransaction's
                -- rollback removes the table made for it.
                NULL;
            END;
        END IF;
        week := week + interval '1 week';
    END LOOP;
    RETURN made;
END
$$;
-- +goose StatementEnd

-- What retention has dropped, so that worker show and the console can say
-- that a row's history is gone rather than show it as never made.
CREATE TABLE postbox_history_dropped (
    history        text        PRIMARY KEY
                               CHECK (history IN ('email_attempts', 'email_events', 'webhook_delivery_attempts', 'webhook_events')),
    dropped_before timestamptz NOT NULL,
    retention      interval    NOT NULL,
    dropped_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
-- postbox_history_convert turns one unpartitioned history table into its
-- partitioned form, keeping its rows in place (see the head of this
-- file). It exists for this migration only.
CREATE FUNCTION postbox_history_convert(rel text, timecol text, columns text, indexes text[], identity boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    legacy text := rel || '_legacy';
    newest timestamptz;
    upper  timestamptz;
    idx    text;
    nextid bigint;
BEGIN
    EXECUTE format('ALTER TABLE %I RENAME TO %I', rel, legacy);
    -- Its foreign key would lock the rows' table when the legacy
    -- partition is dropped (see above).
    FOR idx IN SELECT conname FROM pg_constraint WHERE conrelid = legacy::regclass AND contype = 'f' LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', legacy, idx);
    END LOOP;
    -- Index names are the schema's: the legacy table's move aside so the
    -- partitioned table's indexes take them.
    FOREACH idx IN ARRAY indexes LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', idx, idx || '_legacy');
    END LOOP;
    EXECUTE format('CREATE TABLE %I (%s) PARTITION BY RANGE (%I)', rel, columns, timecol);
    IF identity THEN
        EXECUTE format('SELECT coalesce(max(id), 0) + 1 FROM %I', legacy) INTO nextid;
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id RESTART WITH %s', rel, nextid);
    END IF;
    EXECUTE format('SELECT max(%I) FROM %I', timecol, legacy) INTO newest;
    IF newest IS NULL THEN
        EXECUTE format('DROP TABLE %I', legacy);
    ELSE
        upper := date_trunc('week', greatest(newest, now()), 'UTC') + interval '1 week';
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', rel, legacy, upper);
    END IF;
END
$$;
-- +goose StatementEnd

-- The CHECK constraints are named as they were, because a partition must
-- hold its parent's under the same names: the legacy table has them, and
-- each week copies them (LIKE ... INCLUDING CONSTRAINTS).
SELECT postbox_history_convert('email_attempts', 'at', $$
    row_id  uuid        NOT NULL,
    attempt integer     NOT NULL,
    outcome text        NOT NULL,
    error   text,
    at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_attempts_attempt_check CHECK (attempt >= 0),
    CONSTRAINT email_attempts_outcome_check CHECK (outcome IN ('sent', 'skipped', 'failed', 'retry')),
    CONSTRAINT email_attempts_error_check CHECK (octet_length(error) <= 2000)
$$, ARRAY[]::text[], false);

SELECT postbox_history_convert('email_events', 'received_at', $$
    id                  bigint      GENERATED ALWAYS AS IDENTITY,
    row_id              uuid,
    ref                 text        NOT NULL DEFAULT '',
    type                text        NOT NULL,
    bounce_class        text,
    provider            text        NOT NULL,
    provider_event_id   text        NOT NULL,
    provider_message_id text        NOT NULL DEFAULT '',
    recipient           text        NOT NULL DEFAULT '',
    detail              text        NOT NULL DEFAULT '',
    raw_excerpt         text        NOT NULL DEFAULT '',
    occurred_at         timestamptz,
    received_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_events_ref_check CHECK (octet_length(ref) <= 1024),
    CONSTRAINT email_events_type_check CHECK (type IN ('delivered', 'bounced', 'complained', 'deferred')),
    CONSTRAINT email_events_bounce_class_check CHECK (bounce_class IN ('hard', 'soft')),
    CONSTRAINT email_events_provider_check CHECK (provider ~ '^[a-z][a-z0-9_-]{0,31}$'),
    CONSTRAINT email_events_provider_event_id_check CHECK (octet_length(provider_event_id) BETWEEN 1 AND 1024),
    CONSTRAINT email_events_provider_message_id_check CHECK (octet_length(provider_message_id) <= 1024),
    CONSTRAINT email_events_recipient_check CHECK (recipient = lower(recipient) AND octet_length(recipient) <= 1024),
    CONSTRAINT email_events_detail_check CHECK (octet_length(detail) <= 1024),
    CONSTRAINT email_events_raw_excerpt_check CHECK (octet_length(raw_excerpt) <= 4096),
    CONSTRAINT email_events_check CHECK ((type = 'bounced') = (bounce_class IS NOT NULL))
$$, ARRAY['email_events_row_idx', 'email_events_provider_message_idx', 'email_events_soft_bounce_idx', 'email_events_orphan_idx'], true);

SELECT postbox_history_convert('webhook_delivery_attempts', 'created_at', $$
    id               bigint      GENERATED ALWAYS AS IDENTITY,
    delivery_id      uuid        NOT NULL,
    attempt          integer     NOT NULL,
    status_code      integer,
    duration_ms      integer     NOT NULL,
    error            text,
    response_excerpt text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_delivery_attempts_attempt_check CHECK (attempt >= 1),
    CONSTRAINT webhook_delivery_attempts_status_code_check CHECK (status_code BETWEEN 100 AND 599),
    CONSTRAINT webhook_delivery_attempts_duration_ms_check CHECK (duration_ms >= 0),
    CONSTRAINT webhook_delivery_attempts_response_excerpt_check CHECK (octet_length(response_excerpt) <= 4096)
$$, ARRAY['webhook_delivery_attempts_delivery_idx'], true);

DROP FUNCTION postbox_history_convert(text, text, text, text[], boolean);

-- The indexes, on the partitioned tables: each is made on every week, and
-- the legacy partition's own, of the same definition, is taken as its.
CREATE INDEX email_events_row_idx ON email_events (row_id, received_at) WHERE row_id IS NOT NULL;
CREATE INDEX email_events_provider_message_idx ON email_events (provider, provider_message_id)
    WHERE provider_message_id <> '' AND row_id IS NOT NULL;
CREATE INDEX email_events_soft_bounce_idx ON email_events (recipient, received_at)
    WHERE type = 'bounced' AND bounce_class = 'soft';
CREATE INDEX email_events_orphan_idx ON email_events (received_at DESC) WHERE row_id IS NULL;
CREATE INDEX webhook_delivery_attempts_delivery_idx ON webhook_delivery_attempts (delivery_id, created_at);

SELECT postbox_history_partitions(t, now(), now() + interval '4 weeks')
FROM unnest(ARRAY['email_attempts', 'email_events', 'webhook_delivery_attempts']::regclass[]) AS t;

-- +goose Down
-- Back to one table each, every row kept: the rows are copied into a
-- plain table of the old definition (a rewrite, unlike the way up), which
-- then takes the old names, keys and indexes. What the old keys forbid is
-- left out: a second log of the same attempt, or a second record of the
-- same provider event, that writers racing across a week's boundary could
-- have made (the first is kept), and the log of a row deleted by hand,
-- which the old foreign key's cascade would have deleted with it.
-- +goose StatementBegin
CREATE FUNCTION postbox_history_unconvert(rel text, identity boolean, keep text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)',
        rel || '_down', rel);
    EXECUTE format('INSERT INTO %I SELECT * FROM %I %s', rel || '_down', rel, keep);
    EXECUTE format('DROP TABLE %I', rel);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', rel || '_down', rel);
    IF identity THEN
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY', rel);
        EXECUTE format('SELECT setval(pg_get_serial_sequence(%L, ''id''), coalesce(max(id), 0) + 1, false) FROM %I', rel, rel);
    END IF;
END
$$;
-- +goose StatementEnd
SELECT postbox_history_unconvert('email_attempts', false, $$a
    WHERE EXISTS (SELECT 1 FROM email_outbox o WHERE o.id = a.row_id)
      AND NOT EXISTS (SELECT 1 FROM email_attempts b WHERE b.row_id = a.row_id AND b.attempt = a.attempt
          AND (b.at, b.tableoid::int8, b.ctid::text) < (a.at, a.tableoid::int8, a.ctid::text))$$);
SELECT postbox_history_unconvert('email_events', true, $$e
    WHERE NOT EXISTS (SELECT 1 FROM email_events f WHERE f.provider = e.provider
          AND f.provider_event_id = e.provider_event_id AND f.id < e.id)$$);
SELECT postbox_history_unconvert('webhook_delivery_attempts', true, $$a
    WHERE EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.id = a.delivery_id)$$);
DROP FUNCTION postbox_history_unconvert(text, boolean, text);

ALTER TABLE email_attempts ADD PRIMARY KEY (row_id, attempt),
    ADD FOREIGN KEY (row_id) REFERENCES email_outbox (id) ON DELETE CASCADE;
ALTER TABLE email_events ADD PRIMARY KEY (id), ADD UNIQUE (provider, provider_event_id);
CREATE INDEX email_events_row_idx ON email_events (row_id, received_at) WHERE row_id IS NOT NULL;
CREATE INDEX email_events_provider_message_idx ON email_events (provider, provider_message_id)
    WHERE provider_message_id <> '' AND row_id IS NOT NULL;
CREATE INDEX email_events_soft_bounce_idx ON email_events (recipient, received_at)
    WHERE type = 'bounced' AND bounce_class = 'soft';
CREATE INDEX email_events_orphan_idx ON email_events (received_at DESC) WHERE row_id IS NULL;
ALTER TABLE webhook_delivery_attempts ADD PRIMARY KEY (id),
    ADD FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries (id) ON DELETE CASCADE;
CREATE INDEX webhook_delivery_attempts_delivery_idx ON webhook_delivery_attempts (delivery_id, created_at);

DROP TABLE postbox_history_dropped;
DROP FUNCTION postbox_history_partitions(regclass, timestamptz, timestamptz);
