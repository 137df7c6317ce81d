-- The inbox table of the receiving service on SQL Server, mirroring the
-- PostgreSQL one (see postgresql/00001_create_inbox.sql for the indexes).
-- Times are UTC from the database clock (SYSUTCDATETIME()).

-- +goose Up
CREATE SEQUENCE inbox_sequence_seq AS BIGINT START WITH 1 INCREMENT BY 1;

CREATE TABLE inbox (
    id               UNIQUEIDENTIFIER NOT NULL CONSTRAINT inbox_id_df DEFAULT NEWID(),
    source           NVARCHAR(255)    NOT NULL,
    idempotency_key  NVARCHAR(255)    NOT NULL,
    topic            NVARCHAR(255)    NOT NULL,
    [key]            NVARCHAR(255)    NULL,
    payload          NVARCHAR(MAX)    NOT NULL,
    headers          NVARCHAR(MAX)    NOT NULL CONSTRAINT inbox_headers_df DEFAULT N'{}',
    state            NVARCHAR(50)     NOT NULL CONSTRAINT inbox_state_df DEFAULT N'pending',
    attempt          INT              NOT NULL CONSTRAINT inbox_attempt_df DEFAULT 0,
    max_attempts     INT              NOT NULL CONSTRAINT inbox_max_attempts_df DEFAULT 5,
    scheduled_at     DATETIME2        NOT NULL CONSTRAINT inbox_scheduled_at_df DEFAULT SYSUTCDATETIME(),
    created_at       DATETIME2        NOT NULL CONSTRAINT inbox_created_at_df DEFAULT SYSUTCDATETIME(),
    updated_at       DATETIME2        NOT NULL CONSTRAINT inbox_updated_at_df DEFAULT SYSUTCDATETIME(),
    claimed_at       DATETIME2        NULL,
    lease_expires_at DATETIME2        NULL,
    claim_token      UNIQUEIDENTIFIER NULL,
    last_error       NVARCHAR(MAX)    NULL,
    held_at          DATETIME2        NULL,
    sequence         BIGINT           NOT NULL CONSTRAINT inbox_sequence_df DEFAULT (NEXT VALUE FOR inbox_sequence_seq),
    CONSTRAINT inbox_pkey PRIMARY KEY NONCLUSTERED (id),
    CONSTRAINT inbox_source_idempotency_key UNIQUE (source, idempotency_key)
);

ALTER TABLE inbox SET (LOCK_ESCALATION = DISABLE);

CREATE UNIQUE CLUSTERED INDEX inbox_sequence_idx ON inbox (sequence);

CREATE INDEX inbox_claim_idx ON inbox (source, sequence)
    INCLUDE (id, scheduled_at, [key])
    WHERE state = N'pending';

CREATE INDEX inbox_key_sequence_idx ON inbox (source, [key], sequence)
    INCLUDE (id)
    WHERE state IN (N'pending', N'processing') AND [key] IS NOT NULL;

CREATE INDEX inbox_processing_idx ON inbox (claimed_at)
    INCLUDE (lease_expires_at, claim_token)
    WHERE state = N'processing';

CREATE INDEX inbox_pending_scheduled_idx ON inbox (state, scheduled_at)
    WHERE state = N'pending';

CREATE INDEX inbox_finished_idx ON inbox (state, updated_at)
    WHERE state IN (N'sent', N'dead');

-- +goose Down
DROP TABLE IF EXISTS inbox;
DROP SEQUENCE IF EXISTS inbox_sequence_seq;
