-- The outbox table of the contract (§1) in SQL Server types. The table name
-- is unqualified: goose runs these statements as the connecting user, so the
-- table lands in that user's default schema (dbo for most logins). To put it
-- elsewhere, connect as a user whose DEFAULT_SCHEMA is the target schema.
--
-- Every time is UTC from the database clock: the defaults below and every
-- statement of dialect/sqlserver use SYSUTCDATETIME(), never GETDATE() or the
-- host's local time. DATETIME2 carries no zone; UTC is the
-- convention, and the relay reads the values as UTC.
--
-- JSON is stored as NVARCHAR(MAX). There is deliberately no ISJSON() CHECK
-- constraint: before SQL Server 2022, ISJSON() returns 0 for JSON scalars
-- (a payload of "text" or 42 is valid JSON, as it is for PostgreSQL's
-- JSONB), and the answer would differ by version. The relay validates every
-- claimed row instead and dead-letters text that is not JSON with a clear
-- reason. If your payloads are always objects or arrays, add
--   ALTER TABLE outbox ADD CONSTRAINT outbox_payload_json CHECK (ISJSON(payload) = 1);
-- to reject bad rows in the producing transaction already.
--
-- Index design (see docs/sqlserver.md). The clustered index is on sequence,
-- not on the random NEWID() primary key: inserts append at the end of the
-- table instead of splitting pages all over it, and the claim's ordered scan
-- follows the physical order. The filtered indexes mirror the partial
-- indexes of the PostgreSQL bundle; states are compared as N'...' literals
-- in the dialect's SQL so that the optimizer can match the filters.
--
--   outbox_sequence_idx         UNIQUE CLUSTERED (sequence).
--   outbox_pkey                 PRIMARY KEY NONCLUSTERED (id): every fenced
--                               write seeks its rows by id.
--   outbox_claim_idx            (sequence, id) WHERE state = 'pending',
--                               covering scheduled_at and key: the claim's
--                               ordered scan of pending rows.
--   outbox_key_sequence_idx     (key, sequence) WHERE state IN ('pending',
--                               'processing'): the head-of-key probe.
--   outbox_processing_idx       (claimed_at) WHERE state = 'processing',
--                               covering lease_expires_at and claim_token:
--                               the expired-lease reaper and renew touch only
--                               in-flight rows, never a row a producer is
--                               inserting right now.
--   outbox_state_scheduled_idx  (state, scheduled_at), not filtered: oldest
--                               pending age and the operator queries.
--   outbox_topic_idx            topic: backlog per topic, replay by topic.
--
-- LOCK_ESCALATION = DISABLE: the claim takes row locks only (ROWLOCK) and
-- holds an update lock on every pending row its scan passed over until the
-- statement ends. A scan through a long run of rows that are not heads of
-- their key could pass SQL Server's 5,000-lock escalation threshold; a table
-- lock would then serialize every claimer and producer. Escalation is
-- therefore disabled on this table.

-- +goose Up
CREATE SEQUENCE outbox_sequence_seq AS BIGINT START WITH 1 INCREMENT BY 1;

CREATE TABLE outbox (
    id               UNIQUEIDENTIFIER NOT NULL CONSTRAINT outbox_id_df DEFAULT NEWID(),
    topic            NVARCHAR(255)    NOT NULL,
    [key]            NVARCHAR(255)    NULL,
    payload          NVARCHAR(MAX)    NOT NULL,
    headers          NVARCHAR(MAX)    NOT NULL CONSTRAINT outbox_headers_df DEFAULT N'{}',
    aggregate_type   NVARCHAR(255)    NULL,
    state            NVARCHAR(50)     NOT NULL CONSTRAINT outbox_state_df DEFAULT N'pending',
    attempt          INT              NOT NULL CONSTRAINT outbox_attempt_df DEFAULT 0,
    max_attempts     INT              NOT NULL CONSTRAINT outbox_max_attempts_df DEFAULT 5,
    scheduled_at     DATETIME2        NOT NULL CONSTRAINT outbox_scheduled_at_df DEFAULT SYSUTCDATETIME(),
    created_at       DATETIME2        NOT NULL CONSTRAINT outbox_created_at_df DEFAULT SYSUTCDATETIME(),
    updated_at       DATETIME2        NOT NULL CONSTRAINT outbox_updated_at_df DEFAULT SYSUTCDATETIME(),
    claimed_at       DATETIME2        NULL,
    lease_expires_at DATETIME2        NULL,
    claim_token      UNIQUEIDENTIFIER NULL,
    last_error       NVARCHAR(MAX)    NULL,
    sequence         BIGINT           NOT NULL CONSTRAINT outbox_sequence_df DEFAULT (NEXT VALUE FOR outbox_sequence_seq),
    CONSTRAINT outbox_pkey PRIMARY KEY NONCLUSTERED (id)
);

ALTER TABLE outbox SET (LOCK_ESCALATION = DISABLE);

CREATE UNIQUE CLUSTERED INDEX outbox_sequence_idx ON outbox (sequence);

CREATE INDEX outbox_claim_idx ON outbox (sequence, id)
    INCLUDE (scheduled_at, [key])
    WHERE state = N'pending';

CREATE INDEX outbox_key_sequence_idx ON outbox ([key], sequence)
    INCLUDE (id)
    WHERE state IN (N'pending', N'processing');

CREATE INDEX outbox_processing_idx ON outbox (claimed_at)
    INCLUDE (lease_expires_at, claim_token)
    WHERE state = N'processing';

CREATE INDEX outbox_state_scheduled_idx ON outbox (state, scheduled_at);

CREATE INDEX outbox_topic_idx ON outbox (topic);

-- +goose Down
DROP TABLE IF EXISTS outbox;
DROP SEQUENCE IF EXISTS outbox_sequence_seq;
