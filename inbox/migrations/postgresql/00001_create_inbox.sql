-- The inbox: one row per message a consumer group has applied. The table
-- name is unqualified: run the migrations with the target schema first on
-- search_path. message_id is text, not UUID: ids from other producers need
-- not be UUIDs.

-- +goose Up
CREATE TABLE queuebox_inbox (
    consumer_group VARCHAR(255) NOT NULL,
    message_id     VARCHAR(255) NOT NULL,
    processed_at   TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT queuebox_inbox_pkey PRIMARY KEY (consumer_group, message_id)
);

-- Retention (Purge) deletes a group's oldest rows first.
CREATE INDEX queuebox_inbox_processed_idx ON queuebox_inbox (consumer_group, processed_at);

-- +goose Down
DROP TABLE queuebox_inbox;
