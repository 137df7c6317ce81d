-- The outbox table of the contract (§1). The table name is unqualified: run
-- the migrations with the target schema first on search_path.
--
-- Index design (see docs/claim.md). Each index has one job, and no two
-- partial indexes share a predicate, so the planner never has to pick
-- between two near-identical candidates for the claim:
--
--   outbox_pkey                 id: every fenced write (id = ANY($ids)).
--   outbox_claim_idx            (sequence, id) WHERE state = 'pending': the
--                               claim's ordered scan of pending rows; it
--                               returns rows in exactly the claim's ORDER BY,
--                               so LIMIT stops the scan early. Small: only
--                               pending rows.
--   outbox_key_sequence_idx     (key, sequence) WHERE state IN ('pending',
--                               'processing'): the head-of-key probe (is there
--                               an unfinished row of this key with a lower
--                               sequence?).
--   outbox_processing_idx       (claimed_at) WHERE state = 'processing': the
--                               expired-lease reaper; only in-flight rows.
--   outbox_state_scheduled_idx  (state, scheduled_at), NOT partial: pending
--                               rows by due time (oldest pending age), and
--                               the operator queries on other states (dead
--                               list, replay of dead or sent rows, retention).
--                               Kept full on purpose so that it does not
--                               duplicate the claim index's predicate.
--   outbox_topic_idx            topic: backlog per topic, replay by topic.
--
-- Migration 00003 replaces outbox_state_scheduled_idx and outbox_topic_idx
-- with partial indexes split by state (pending; sent and dead), so that a
-- state change writes fewer index entries.
--
-- States are compared as literals in the dialect's SQL (never as bind
-- parameters) so that the planner can prove the partial predicates.
--
-- fillfactor 70: every row is updated two or three times (claim, renew,
-- complete). Renewals touch no indexed column and become HOT updates when the
-- page has room; the other updates at least land on the same page.

-- +goose Up
CREATE SEQUENCE outbox_sequence_seq AS BIGINT;

CREATE TABLE outbox (
    id               UUID         NOT NULL DEFAULT gen_random_uuid(),
    topic            VARCHAR(255) NOT NULL,
    key              VARCHAR(255),
    payload          JSONB        NOT NULL,
    headers          JSONB        NOT NULL DEFAULT '{}'::jsonb,
    aggregate_type   VARCHAR(255),
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
    sequence         BIGINT       NOT NULL DEFAULT nextval('outbox_sequence_seq'),
    CONSTRAINT outbox_pkey PRIMARY KEY (id)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05);

ALTER SEQUENCE outbox_sequence_seq OWNED BY outbox.sequence;

CREATE INDEX outbox_claim_idx ON outbox (sequence, id)
    WHERE state = 'pending';

CREATE INDEX outbox_key_sequence_idx ON outbox (key, sequence)
    WHERE state IN ('pending', 'processing');

CREATE INDEX outbox_processing_idx ON outbox (claimed_at)
    WHERE state = 'processing';

CREATE INDEX outbox_state_scheduled_idx ON outbox (state, scheduled_at);

CREATE INDEX outbox_topic_idx ON outbox (topic);

-- +goose Down
DROP TABLE outbox;
DROP SEQUENCE IF EXISTS outbox_sequence_seq;
