-- The inbox table of the receiving service (docs/inbox.md). It has the
-- outbox's columns, states and lease columns, so that the dialect's fenced
-- writes, stats, dead list, replay and retention run on it unchanged, plus
-- the source a message came from and its idempotency key. The table name is
-- unqualified: run the migrations with the target schema first on
-- search_path.
--
--   inbox_pkey                     id: every fenced write.
--   inbox_source_idempotency_key   UNIQUE (source, idempotency_key): the
--                                  receive's INSERT ... ON CONFLICT DO NOTHING.
--   inbox_claim_idx                (source, sequence) WHERE pending: a pull
--                                  worker's claim of one source, in order.
--   inbox_key_sequence_idx         (source, key, sequence) WHERE pending or
--                                  processing, keyed: the head-of-key probe.
--   inbox_processing_idx           (claimed_at) WHERE processing: the reaper.
--   inbox_pending_scheduled_idx    (state, scheduled_at) WHERE pending: stats.
--   inbox_finished_idx             (state, updated_at) WHERE sent or dead:
--                                  dead list, replay by time, retention.
--
-- A message handed on to the outbox (handoff: push) is stored sent; only
-- rows of pull sources are ever pending or processing here.

-- +goose Up
CREATE SEQUENCE inbox_sequence_seq AS BIGINT;

CREATE TABLE inbox (
    id               UUID         NOT NULL DEFAULT gen_random_uuid(),
    source           VARCHAR(255) NOT NULL,
    idempotency_key  VARCHAR(255) NOT NULL,
    topic            VARCHAR(255) NOT NULL,
    key              VARCHAR(255),
    payload          JSONB        NOT NULL,
    headers          JSONB        NOT NULL DEFAULT '{}'::jsonb,
    state            VARCHAR(50)  NOT NULL DEFAULT 'pending',
    attempt          INTEGER      NOT NULL DEFAULT 0,
    max_attempts     INTEGER      NOT NULL DEFAULT 5,
    scheduled_at     TIMESTAMPTZ  NOT NULL DEFAULT now(),
    created_at       TIMESTAMPTZ  NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ  NOT NULL DEFAULT now(),
    claimed_at       TIMESTAMPTZ,
    lease_expires_at TIMESTAMPTZ,
    claim_token      UUID,
    last_error       TEXT,
    held_at          TIMESTAMPTZ,
    sequence         BIGINT       NOT NULL DEFAULT nextval('inbox_sequence_seq'),
    CONSTRAINT inbox_pkey PRIMARY KEY (id),
    CONSTRAINT inbox_source_idempotency_key UNIQUE (source, idempotency_key)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05);

ALTER SEQUENCE inbox_sequence_seq OWNED BY inbox.sequence;

CREATE INDEX inbox_claim_idx ON inbox (source, sequence)
    WHERE state = 'pending';

CREATE INDEX inbox_key_sequence_idx ON inbox (source, key, sequence)
    WHERE state IN ('pending', 'processing') AND key IS NOT NULL;

CREATE INDEX inbox_processing_idx ON inbox (claimed_at)
    WHERE state = 'processing';

CREATE INDEX inbox_pending_scheduled_idx ON inbox (state, scheduled_at)
    WHERE state = 'pending';

CREATE INDEX inbox_finished_idx ON inbox (state, updated_at)
    WHERE state IN ('sent', 'dead');

-- +goose Down
DROP TABLE inbox;
DROP SEQUENCE IF EXISTS inbox_sequence_seq;
